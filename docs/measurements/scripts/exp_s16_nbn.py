"""Session 16: native_batch_norm samples on the H200 whose outputs differ from CUDA eager —
ours, CUDA eager, CPU eager and a float64 run side by side."""
import sys, warnings, torch
sys.path.insert(0, ".")
from torch.testing._internal.common_methods_invocations import op_db
from integration_tests.opinfo import compiled as C
from integration_tests.opinfo.captured import fresh, outputs_mismatch, run_on_copies
from integration_tests.opinfo.harness import flat_outputs, float64_reference
from integration_tests.opinfo.user_fn import user_function
import torchstrata.runtime as tsr
warnings.simplefilter("ignore")
op = next(o for o in op_db if o.name == "native_batch_norm")
for dt, index, noncontig in ((torch.float16, 1, False), (torch.float16, 0, True)):
    s = list(op.sample_inputs("cuda", dt))[index]
    s = s.noncontiguous() if noncontig else s
    fn, tensors, _ = user_function(op.op, s, op.name)
    print("==", dt, index, noncontig, [tuple(t.shape) for t in tensors], s.args[4:])
    want, _ = run_on_copies(fn, tensors)
    got = tsr.compile(fn, options={"codegen": "triton"})(*[fresh(t) for t in tensors])
    cpu = [fresh(t, on_cpu=True) for t in tensors]
    try:
        on_cpu, _ = run_on_copies(fn, cpu)
    except Exception as e:
        on_cpu = None; print("cpu eager raises", type(e).__name__, e)
    ref = float64_reference(fn, cpu)
    for i in range(3):
        print(f" out{i}: ours {tuple(got[i].shape)} {got[i].flatten()[:5].tolist()}")
        print(f"        cuda {tuple(want[i].shape)} {want[i].flatten()[:5].tolist()}")
        if on_cpu is not None:
            print(f"        cpu  {tuple(on_cpu[i].shape)} {on_cpu[i].flatten()[:5].tolist()}")
        if ref is not None:
            print(f"        f64  {tuple(ref[i].shape)} {ref[i].flatten()[:5].tolist()}")
    if on_cpu is not None:
        print(" ours vs cpu eager:", outputs_mismatch(op, [t.cpu() for t in got], flat_outputs(on_cpu), ref))
