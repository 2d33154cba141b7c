"""Session 17: avg_pool1d's gradient on a column-major input, wrong on the H200 only.

Prints the backward's launcher, runs the compiled backward against the reference
interpreter, and runs the extern ``avg_pool2d_backward`` on the operands as the launcher
makes them (stride-0 views) and as eager makes them.
"""

import torch
import torch.nn.functional as F

from integration_tests.opinfo.harness import build_graph
from torchstrata.autograd import aot
from torchstrata.core import CompileOptions, interpret
from torchstrata.decomp import decompose
from torchstrata.inductor.compile import compile_graph


def f(x):
    return F.avg_pool1d(x, 3, stride=1, padding=1, ceil_mode=True, count_include_pad=False)


torch.manual_seed(0)
x = torch.randn(1, 9, 3, device="cuda").transpose(1, 2).requires_grad_()
g, _ = build_graph(f, [x], [f(x)])
bw = decompose(aot(g).backward)
print(bw)
cg = compile_graph(bw, "cuda", CompileOptions(codegen="triton"))
print(cg.launcher_source)
t = torch.randn(1, 3, 9, device="cuda")
(ours,) = cg.fn(x.detach(), t)
(ref,) = interpret(bw, x.detach(), t)
(eager,) = torch.autograd.grad(f(x), x, t)
print("compiled vs eager", (ours - eager).abs().max().item(), "interpreted vs eager", (ref - eager).abs().max().item())
a = t.as_strided((1, 3, 1, 9), (27, 9, 0, 1))
b = x.detach().as_strided((1, 3, 1, 9), (27, 1, 0, 3))
args = ([1, 3], [1, 1], [0, 1], True, False, None)
zero_strided = torch.ops.aten.avg_pool2d_backward(a, b, *args)
plain = torch.ops.aten.avg_pool2d_backward(t.unsqueeze(2), x.detach().unsqueeze(-2), *args)
print("extern strides: stride-0 operands", zero_strided.stride(), "eager operands", plain.stride())
print("extern values differ by", (zero_strided - plain).abs().max().item())
print("meta strides", torch.ops.aten.avg_pool2d_backward(a.to("meta"), b.to("meta"), *args).stride())
