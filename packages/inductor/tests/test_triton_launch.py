"""Direct launches of a compiled Triton kernel: the first call goes through Triton's
dispatch, later ones call the kernel's launcher, unless something it was specialised on
changed (pointer alignment) or a launch hook is set."""

from __future__ import annotations

import pytest
import torch

from torchstrata.core import (
    GraphBuilder,
    InductorOptions,
    Level,
    TensorMeta,
    interpret,
    prim,
    random_inputs,
)
from torchstrata.inductor.launch import triton_launch
from torchstrata.inductor.launch.triton_launch import DirectLaunch

pytest.importorskip("triton")


class FakeKernel:
    """Stands for Triton's CompiledKernel: records launcher calls."""

    def __init__(self) -> None:
        self.function, self.packed_metadata = "function", "metadata"
        self.launches: list[tuple] = []

    def _init_handles(self) -> None:
        pass

    def run(self, *values) -> None:
        self.launches.append(values)


class FakeJit:
    """Stands for a JITFunction of two buffers and two constexprs."""

    arg_names = ("buf_x", "buf_y", "XBLOCK", "RBLOCK")

    def __init__(self, fails: bool = False) -> None:
        self.kernel, self.fails, self.warmups = FakeKernel(), fails, 0

    def warmup(self, *args, grid, **constants):
        self.warmups += 1
        if self.fails:
            raise RuntimeError("no warmup in this Triton")
        return self.kernel


@pytest.fixture
def no_hooks(monkeypatch):
    monkeypatch.setattr(triton_launch, "_getters", triton_launch._late_getters)
    monkeypatch.setattr(triton_launch, "_hooked", lambda: False)
    monkeypatch.setattr(triton_launch, "current_stream", lambda device: 7)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 0)


def _launcher(jit, calls):
    constants = {"XBLOCK": 4, "RBLOCK": 256, "num_warps": 8, "num_stages": 1}
    return DirectLaunch(jit, (5,), constants, lambda *args: calls.append(args))


def test_later_calls_use_the_kernels_launcher(no_hooks):
    jit, calls = FakeJit(), []
    launch = _launcher(jit, calls)
    x, y = torch.zeros(64), torch.zeros(64)
    launch(x, y)
    assert len(calls) == 1 and jit.warmups == 1 and not jit.kernel.launches
    launch(x, y)
    launch(x, y)
    assert len(calls) == 1
    (grid_x, grid_y, grid_z, stream, function, metadata, *rest), _ = jit.kernel.launches
    assert (grid_x, grid_y, grid_z, stream, function, metadata) == (
        5,
        1,
        1,
        7,
        "function",
        "metadata",
    )
    assert rest[:3] == [None, None, None] and rest[3] is x and rest[4] is y and rest[5:] == [4, 256]


class FakeCudaLauncher:
    """Stands for Triton's CudaLauncher: a C ``launch`` under a Python ``__call__`` that
    allocates scratch memory first."""

    def __init__(self, scratch: int) -> None:
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = False, True
        self.launched: list[tuple] = []
        self.called: list[tuple] = []

    def launch(self, *values) -> None:
        self.launched.append(values)

    def __call__(self, *values) -> None:
        self.called.append(values)


@pytest.mark.parametrize("scratch", [0, 128])
def test_without_scratch_memory_the_c_launcher_is_called_itself(no_hooks, scratch):
    jit, calls = FakeJit(), []
    jit.kernel.run = runner = FakeCudaLauncher(scratch)
    launch = _launcher(jit, calls)
    x, y = torch.zeros(64), torch.zeros(64)
    for _ in range(3):
        launch(x, y)
    assert len(calls) == 1
    if scratch:  # Triton's own call allocates the scratch memory
        assert not runner.launched and len(runner.called) == 2
        return
    assert not runner.called and len(runner.launched) == 2
    # what CudaLauncher.__call__ passes: grid, stream, function, its flags, no scratch
    # buffers, then the packed metadata, no launch metadata or hooks, the arguments
    head = (5, 1, 1, 7, "function", False, True, None, None, "metadata", None, None, None)
    values = runner.launched[-1]
    assert values[:13] == head and values[13] is x and values[14] is y and values[15:] == (4, 256)


def test_a_misaligned_pointer_goes_through_triton(no_hooks):
    jit, calls = FakeJit(), []
    launch = _launcher(jit, calls)
    base = torch.zeros(65)
    launch(base[:64], base[:64])
    launch(base[1:], base[:64])  # 4 bytes off: Triton specialised on 16-byte alignment
    assert len(calls) == 2 and not jit.kernel.launches


def test_another_current_device_goes_through_triton(no_hooks, monkeypatch):
    jit, calls = FakeJit(), []
    launch = _launcher(jit, calls)
    x = torch.zeros(8)
    launch(x, x)
    launch(x, x)
    assert len(calls) == 1 and len(jit.kernel.launches) == 1
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 1)  # loaded on device 0
    launch(x, x)
    assert len(calls) == 2 and len(jit.kernel.launches) == 1


def test_a_failing_kernel_lookup_keeps_dispatching(no_hooks):
    jit, calls = FakeJit(fails=True), []
    launch = _launcher(jit, calls)
    x = torch.zeros(8)
    for _ in range(3):
        launch(x, x)
    assert len(calls) == 3 and jit.warmups == 1


def test_a_launcher_of_another_signature_falls_back_for_good(no_hooks):
    jit, calls = FakeJit(), []

    def refuse(*values):
        raise TypeError("launcher takes other arguments")

    jit.kernel.run = refuse
    launch = _launcher(jit, calls)
    x = torch.zeros(8)
    for _ in range(3):
        launch(x, x)
    assert len(calls) == 3


def test_launch_hooks_go_through_triton(monkeypatch):
    jit, calls = FakeJit(), []
    launch = _launcher(jit, calls)
    monkeypatch.setattr(triton_launch, "_getters", triton_launch._late_getters)
    monkeypatch.setattr(triton_launch, "current_stream", lambda device: 7)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 0)
    x = torch.zeros(8)
    monkeypatch.setattr(triton_launch, "_hooked", lambda: False)
    launch(x, x)
    monkeypatch.setattr(triton_launch, "_hooked", lambda: True)
    launch(x, x)
    assert len(calls) == 2 and not jit.kernel.launches


def test_an_empty_hook_chain_is_no_hook():
    class Chain:
        def __init__(self, calls):
            self.calls = calls

    assert not triton_launch._is_set(None)
    assert not triton_launch._is_set(Chain([]))
    assert triton_launch._is_set(Chain([print]))
    assert triton_launch._is_set(print)
    assert not triton_launch._hooked()  # Triton's defaults: no hook set


@pytest.fixture
def real_hooks(monkeypatch):
    """The device and stream getters faked, Triton's own launch hooks read."""
    monkeypatch.setattr(triton_launch, "_getters", triton_launch._late_getters)
    monkeypatch.setattr(triton_launch, "current_stream", lambda device: 7)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 0)
    return triton_launch._runtime_knobs()


def _hot(jit, calls, x, y):
    """The hot path a launcher proven on (x, y) hands on (the latest it handed: its first
    call hands on another)."""
    launch = _launcher(jit, calls)
    handed = []
    launch.on_proven = handed.append
    for _ in range(3):
        launch(x, y)
    assert len(handed) == 1 and len(calls) == 1 and len(jit.kernel.launches) == 2
    return lambda *args: handed[-1](*args)


def test_the_hot_path_launches_as_the_launcher_does(real_hooks):
    jit, calls = FakeJit(), []
    x, y = torch.zeros(64), torch.zeros(64)
    hot = _hot(jit, calls, x, y)
    hot(x, y)
    hot(x, y)
    assert len(calls) == 1 and len(jit.kernel.launches) == 4
    # the same values, the tensors passed as their pointers (no data_ptr() call and no
    # driver query of each in Triton's launcher)
    by_tensor, by_pointer = jit.kernel.launches[1], jit.kernel.launches[-1]
    assert by_tensor[9] is x and by_tensor[10] is y
    assert by_pointer == (*by_tensor[:9], x.data_ptr(), y.data_ptr(), *by_tensor[11:])
    assert by_pointer[:6] == (5, 1, 1, 7, "function", "metadata") and by_pointer[-2:] == (4, 256)


def test_a_launcher_refusing_pointers_is_passed_the_tensors(real_hooks):
    jit, calls = FakeJit(), []
    launches = jit.kernel.launches

    def tensors_only(*values):
        if any(type(value) is int for value in values[9:11]):
            raise TypeError("Pointer argument must have a data_ptr method")  # nothing launched
        launches.append(values)

    jit.kernel.run = tensors_only
    x = torch.zeros(8)
    hot = _hot(jit, calls, x, x)
    hot(x, x)  # refused with pointers: launched once with the tensors
    assert len(launches) == 3 and launches[-1][9] is x
    hot(x, x)  # the first call's wrapper, which handed the tensor path on
    assert len(launches) == 4 and len(calls) == 1


def test_the_hot_path_of_a_misaligned_pointer_goes_through_triton(real_hooks):
    jit, calls = FakeJit(), []
    base = torch.zeros(80)
    hot = _hot(jit, calls, base[:64], base[4:68])  # x aligned, y 16 bytes off
    hot(base[1:65], base[4:68])  # x 4 bytes off
    hot(base[:64], base[1:65])  # y 4 bytes off: still one alignment Triton keys apart
    assert len(calls) == 3 and len(jit.kernel.launches) == 2
    hot(base[4:68], base[8:72])  # both 16-byte aligned: the kernel's specialisation
    assert len(calls) == 3 and len(jit.kernel.launches) == 3


def test_the_hot_path_of_an_unaligned_first_call_keeps_its_alignment(real_hooks):
    jit, calls = FakeJit(), []
    base = torch.zeros(80)
    hot = _hot(jit, calls, base[1:65], base[:64])  # taken with x misaligned
    hot(base[2:66], base[4:68])
    assert len(calls) == 1 and len(jit.kernel.launches) == 3
    hot(base[:64], base[:64])  # x aligned now: another specialisation
    assert len(calls) == 2 and len(jit.kernel.launches) == 3


def test_the_hot_path_sees_launch_hooks(real_hooks, monkeypatch):
    jit, calls = FakeJit(), []
    x = torch.zeros(8)
    hot = _hot(jit, calls, x, x)
    hooks = real_hooks.launch_enter_hook
    if not hasattr(hooks, "add"):
        pytest.skip("this Triton keeps no hook chain")
    watched = []
    hooks.add(watched.append)
    try:
        hot(x, x)
    finally:
        hooks.remove(watched.append)
    assert len(calls) == 2 and len(jit.kernel.launches) == 2  # through Triton's dispatch
    hot(x, x)
    assert len(calls) == 2 and len(jit.kernel.launches) == 3
    monkeypatch.setattr(real_hooks, "launch_exit_hook", print)  # a hook set outright
    hot(x, x)
    assert len(calls) == 3 and len(jit.kernel.launches) == 3


def test_the_hot_path_of_another_current_device_goes_through_triton(real_hooks, monkeypatch):
    jit, calls = FakeJit(), []
    x = torch.zeros(8)
    hot = _hot(jit, calls, x, x)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 1)  # loaded on device 0
    hot(x, x)
    assert len(calls) == 2 and len(jit.kernel.launches) == 2


def test_a_tuned_kernel_calls_the_hot_path_itself(real_hooks, monkeypatch):
    from torchstrata.inductor.codegen.triton.tuning import Config, TunedKernel

    jit, calls = FakeJit(), []
    config = Config(4, 256, 8, False)
    monkeypatch.setattr(TunedKernel, "bind", lambda self, chosen: _launcher(jit, calls))
    tuned = TunedKernel({config.variant: jit}, [config], 5, None, compiled=True)
    x = torch.zeros(8)
    for _ in range(3):
        tuned.run(x, x)
    assert not isinstance(tuned.run, DirectLaunch)  # the generated function
    assert "launcher(" in (tuned.run.__doc__ or "")
    tuned.run(x, x)
    assert len(calls) == 1 and len(jit.kernel.launches) == 3


def test_a_sized_kernel_takes_the_hot_path_at_each_size(real_hooks, monkeypatch):
    # a kernel lowered for many sizes (decision 0400): each size's launcher hands its
    # generated hot path (decision 0461) to that size's entry, the tuned size's and one
    # bound to the bucket's choice alike
    from torchstrata.inductor.codegen.triton.sized_launch import SizedKernel
    from torchstrata.inductor.codegen.triton.tuning import Config, TunedKernel

    jit, calls = FakeJit(), []
    config = Config(4, 256, 8, False)
    monkeypatch.setattr(TunedKernel, "bind", lambda self, chosen: _launcher(jit, calls))
    tuned = TunedKernel({config.variant: jit}, [config], 5, None, compiled=True)
    sized = SizedKernel(tuned, ["s0"], hints=[5])
    x = torch.zeros(8)
    for size in (5, 7):
        for _ in range(3):
            sized.run(x, x, size)
        hot = sized.launches[(size,)]
        assert not isinstance(hot, DirectLaunch)  # the generated function
        assert "launcher(" in (hot.__doc__ or "")
    launched = len(jit.kernel.launches)
    sized.run(x, x, 7)
    sized.run(x, x, 5)
    assert len(calls) == 2 and len(jit.kernel.launches) == launched + 2


def test_direct_launches_are_on_unless_turned_off():
    assert InductorOptions().direct_launch
    assert not InductorOptions.from_env({"TORCHSTRATA_DIRECT_LAUNCH": "0"}).direct_launch
    assert InductorOptions.from_env({"TORCHSTRATA_DIRECT_LAUNCH": "1"}).direct_launch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("shape", [(64, 256), (33, 1000), (4, 70001)])
def test_direct_launches_match_eager_cuda(ind, monkeypatch, shape):
    # Pointwise, persistent and looped row kernels; the third call runs every kernel
    # through DirectLaunch, and its results must match eager's.
    # split rows (offered for rows of 65536+) keep Triton's dispatch: every kernel here
    # must be one DirectLaunch serves
    no_splits = InductorOptions(split_rows=False)
    direct = []  # one entry per direct launch (through the kernel's own launcher)
    launcher_of = triton_launch._launcher_of

    def counted(kernel):
        launch, head = launcher_of(kernel)
        # the kernel, and whether its tensors came as pointers (the generated hot path)
        pointers = lambda values: not any(isinstance(v, torch.Tensor) for v in values)  # noqa: E731
        return (lambda *values: (direct.append((kernel, pointers(values))), launch(*values))), head

    monkeypatch.setattr(triton_launch, "_launcher_of", counted)
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta(shape, torch.bfloat16))
    xf = b.call(prim("convert_element_type"), x, torch.float32)
    soft = b.call(prim("convert_element_type"), ind.softmax_last(b, xf), torch.bfloat16)
    doubled = b.call(prim("mul"), xf, 2.0)
    graph = b.build([soft, doubled])
    compiled = ind.compile(graph, "cuda", no_splits)
    inputs = random_inputs(graph, seed=3)
    expected = interpret(graph, *inputs)
    for _ in range(2):
        compiled(*inputs)
    before = len(direct)
    actual = compiled(*inputs)
    assert len(direct) - before == len(compiled.kernels) >= 1
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    before = len(direct)
    actual = compiled(*inputs)  # the generated hot paths, passing pointers (decision 0461)
    assert len(direct) - before == len(compiled.kernels)
    by_pointer = [pointers for _, pointers in direct[before:]]
    # kernels with scratch buffers (tails) launch through DirectLaunch itself
    assert all(by_pointer) if shape == (64, 256) else any(by_pointer)
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)
    # an input 2 bytes off the 16-byte alignment the kernels were specialised on
    numel = inputs[0].numel()
    storage = torch.empty(numel + 8, dtype=torch.bfloat16)
    shifted = storage[1 : 1 + numel].view(shape).copy_(inputs[0])
    assert shifted.data_ptr() % 16 == 2
    before = len(direct)
    actual = compiled(shifted)
    assert len(direct) == before  # every kernel reads x: all through Triton's dispatch
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_scratch_buffers_are_one_pair_per_stream(where):
    """Kernels with counters (tails, split rows) get scratch buffers allocated once per
    stream: two streams must not share counters, one stream reuses its pair."""
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from torchstrata.inductor.codegen.triton.tuning import _with_scratch

    seen: list[tuple[int, int]] = []
    run = _with_scratch(
        lambda x, floats, counters: seen.append((floats.data_ptr(), counters.data_ptr())), 8, 2
    )
    x = torch.zeros(4, device=where)
    run(x)
    run(x)
    assert seen[0] == seen[1]
    if where == "cuda":
        other = torch.cuda.Stream()
        with torch.cuda.stream(other):
            run(x)
            run(x)
        assert seen[2] == seen[3] and seen[2] != seen[0]
        run(x)
        assert seen[4] == seen[0]


class _TorchDriver:
    """Triton's CUDA driver as it is under torch: the getters are torch's own."""

    def __init__(self, raw_device, raw_stream) -> None:
        self.get_current_device = torch.cuda.current_device
        self.get_current_stream = raw_stream
        self.raw_device = raw_device


def test_the_hot_path_reads_device_and_stream_from_torchs_c_functions(monkeypatch):
    def raw_device():
        return 3

    def raw_stream(device):
        return 40 + device

    monkeypatch.setattr(torch._C, "_cuda_getDevice", raw_device, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", raw_stream, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(triton_launch, "_driver", lambda: _TorchDriver(raw_device, raw_stream))
    get_device, get_stream = triton_launch._getters()
    assert get_device is raw_device and get_stream is raw_stream


def test_other_getters_are_the_dispatchs_own(monkeypatch):
    class Other:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 5

    monkeypatch.setattr(triton_launch, "_driver", Other)
    monkeypatch.setattr(triton_launch, "_current_device", lambda: 2)
    monkeypatch.setattr(triton_launch, "current_stream", lambda device: 9)
    get_device, get_stream = triton_launch._getters()
    assert get_device() == 2 and get_stream(0) == 9  # through this module, late-bound

    def no_driver():
        raise RuntimeError("0 active drivers")

    monkeypatch.setattr(triton_launch, "_driver", no_driver)
    get_device, get_stream = triton_launch._getters()
    assert get_device() == 2 and get_stream(0) == 9
