import sys, torch
sys.path.insert(0, "packages/inductor/tests")
from torchstrata.core import GraphBuilder, Level, TensorMeta, prim
from torchstrata.inductor.kernel import Kernel
from torchstrata.inductor.lowering import lower_graph
from torchstrata.inductor.plan import plan_graph
from torchstrata.inductor.triton_codegen import generate_triton
from torchstrata.inductor.triton_printer import supports
from conftest import softmax_last
def kernel_for(rows, length):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.bfloat16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    g = b.build([b.call(prim("convert_element_type"), softmax_last(b, xf), torch.bfloat16)])
    lowered = lower_graph(g, lambda n, d: supports(n, d, interpret=False))
    (k,) = [s for s in plan_graph(g, lowered).steps if isinstance(s, Kernel)]
    return k
if __name__ == "__main__":
  for n in (65536, 262144):
    k = kernel_for(2**26 // n, n)
    for group in (0, 8):
        src = generate_triton(k, interpret=False, persistent=False, group=group, even_rows=True, even_row=True)
        open(f".gpu/k3_{n}_{'group' if group else 'row'}.py", "w").write(src)
    print(src)
