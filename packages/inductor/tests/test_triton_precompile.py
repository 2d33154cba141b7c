"""Launch configurations compiled on several threads before autotuning times them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from torchstrata.core import InductorOptions
from torchstrata.inductor.codegen.triton.precompile import compile_configs, default_threads
from torchstrata.inductor.codegen.triton.tuning import Config, TunedKernel


class FakeJit:
    """Records each ``warmup`` (what Triton's dispatch would compile); fails on request."""

    def __init__(self, fail_warps: int | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], tuple[int, ...], dict[str, Any]]] = []
        self.fail_warps = fail_warps
        self.lock = threading.Lock()

    def warmup(self, *args: Any, grid: tuple[int, ...], **constants: Any) -> None:
        if constants.get("num_warps") == self.fail_warps:
            raise RuntimeError("out of resources: shared memory")
        with self.lock:
            self.calls.append((threading.current_thread().name, args, grid, constants))


def _tuned(variants: dict[Any, Any], configs: list[Config], **kwargs: Any) -> TunedKernel:
    return TunedKernel(variants, configs, 4096, None, True, **kwargs)


def test_every_config_but_clusters_is_compiled_with_its_launch_arguments() -> None:
    persistent, split = FakeJit(), FakeJit()
    configs = [
        Config(4, 256, 4, True),
        Config(4, 256, 8, True),
        Config(1, 2048, 4, True, split=2),
        Config(1, 1024, 8, False, cluster=8),  # compiled by its own launch, when timed
    ]
    tuned = _tuned(
        {(True, 0, 1, 1): persistent, (True, 0, 2, 1): split, (False, 0, 1, 8): FakeJit()},
        configs,
        scratch=lambda parts: (parts * 4096, 4096),
        fp_fusion=False,
    )
    args = (torch.zeros(4096, 256), torch.empty(4096, 256))
    jobs = tuned.compile_jobs(args)
    assert compile_configs(jobs, contextlib.nullcontext, threads=4) == 3
    warps = sorted(constants["num_warps"] for _, _, _, constants in persistent.calls)
    assert warps == [4, 8]
    for _, call_args, grid, constants in persistent.calls:
        assert call_args == args and grid == (1024,)
        assert constants["XBLOCK"] == 4 and constants["RBLOCK"] == 256
        assert constants["enable_fp_fusion"] is False  # explicit, as the launch passes it
    [(_, split_args, grid, _)] = split.calls
    assert grid == (4096 * 2,)
    partials, counters = split_args[2:]
    assert (partials.numel(), partials.dtype) == (2 * 4096, torch.float32)
    assert (counters.numel(), counters.dtype) == (4096, torch.int32)


def test_compiles_run_on_worker_threads_each_inside_the_compile_scope() -> None:
    jit = FakeJit()
    entered: list[str] = []

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        entered.append(threading.current_thread().name)
        yield

    configs = [Config(1, 1024, w, True, num_stages=s) for w in (4, 8) for s in (1, 2)]
    tuned = _tuned({(True, 0, 1, 1): jit}, configs)
    compile_configs(tuned.compile_jobs((torch.zeros(8),)), scope, threads=4)
    names = [name for name, *_ in jit.calls]
    assert len(names) == 4 and all(name.startswith("torchstrata-triton") for name in names)
    assert sorted(entered) == sorted(names)


def test_a_config_that_fails_to_compile_is_left_to_the_timing_loop() -> None:
    jit = FakeJit(fail_warps=8)
    configs = [Config(1, 1024, 4, True), Config(1, 1024, 8, True), Config(1, 1024, 16, True)]
    tuned = _tuned({(True, 0, 1, 1): jit}, configs)
    assert compile_configs(tuned.compile_jobs((torch.zeros(8),)), contextlib.nullcontext, 2) == 2
    assert sorted(c["num_warps"] for *_, c in jit.calls) == [4, 16]


def test_one_thread_compiles_in_the_calling_thread() -> None:
    jit = FakeJit()
    tuned = _tuned({(True, 0, 1, 1): jit}, [Config(1, 1024, 4, True), Config(2, 1024, 4, True)])
    compile_configs(tuned.compile_jobs((torch.zeros(8),)), contextlib.nullcontext, threads=1)
    assert {name for name, *_ in jit.calls} == {threading.current_thread().name}


def test_autotuning_compiles_before_it_times(monkeypatch: pytest.MonkeyPatch) -> None:
    jit = FakeJit()
    tuned = _tuned({(True, 0, 1, 1): jit}, [Config(1, 1024, 4, True), Config(2, 1024, 8, True)])
    tuned.compile_threads = 2
    seen: list[int] = []
    monkeypatch.setattr(tuned, "_time_configs", lambda args, report: seen.append(len(jit.calls)))
    tuned._benchmark((torch.zeros(8),))
    assert seen == [2]


def test_compile_threads_option() -> None:
    assert InductorOptions().compile_threads is None
    assert InductorOptions(compile_threads=3).compile_threads == 3
    assert 1 <= default_threads() <= 16
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="compile_threads"):
            InductorOptions(compile_threads=bad)


class FakeChoices:
    """A tuning cache holding ``config``."""

    def __init__(self, config: Config | None) -> None:
        self.config = config

    def read(self) -> Config | None:
        return self.config


def test_a_built_kernel_queues_its_compiles_with_dtypes_for_tensors() -> None:
    jit, split = FakeJit(), FakeJit()
    configs = [
        Config(1, 1024, 4, True),
        Config(1, 1024, 8, True),
        Config(1, 2048, 4, True, split=2),
    ]
    tuned = _tuned(
        {(True, 0, 1, 1): jit, (True, 0, 2, 1): split},
        configs,
        scratch=lambda parts: (parts * 8, 8),
        compile_threads=3,
    )
    tuned.start_compiles([torch.bfloat16, torch.float32], device=None)
    assert tuned.pending is not None and len(tuned.pending) == 3
    assert all(future.result() for future in tuned.pending)
    assert {call[1] for call in jit.calls} == {(torch.bfloat16, torch.float32)}
    [(_, split_args, _, _)] = split.calls
    assert split_args == (torch.bfloat16, torch.float32, torch.float32, torch.int32)


def test_a_tuned_choice_in_the_cache_is_the_only_config_compiled_ahead() -> None:
    jit = FakeJit()
    configs = [Config(1, 1024, 4, True), Config(1, 1024, 8, True), Config(2, 1024, 8, True)]
    tuned = TunedKernel({(True, 0, 1, 1): jit}, configs, 4096, FakeChoices(configs[2]), True)  # type: ignore[arg-type]
    tuned.start_compiles([torch.float32], device=None)
    assert tuned.pending is not None
    for future in tuned.pending:
        future.result()
    assert [c["num_warps"] for *_, c in jit.calls] == [8] and jit.calls[0][2] == (2048,)


def test_the_first_call_waits_for_queued_compiles_and_compiles_no_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    class SlowJit(FakeJit):
        def warmup(self, *args: Any, grid: tuple[int, ...], **constants: Any) -> None:
            release.wait(5)
            super().warmup(*args, grid=grid, **constants)

    jit = SlowJit()
    configs = [Config(1, 1024, 4, True), Config(1, 1024, 8, True)]
    tuned = _tuned({(True, 0, 1, 1): jit}, configs, compile_threads=2)
    tuned.choice_cache = FakeChoices(None)  # type: ignore[assignment]
    tuned.choice_cache.write = lambda config: None  # type: ignore[attr-defined]
    tuned.start_compiles([torch.float32], device=None)
    seen: list[int] = []
    monkeypatch.setattr(
        tuned, "_time_configs", lambda args, report: seen.append(len(jit.calls)) or configs[0]
    )
    monkeypatch.setattr(tuned, "bind", lambda config: lambda *args: None)
    threading.Timer(0.2, release.set).start()
    tuned._tune_and_launch((torch.zeros(8),))
    assert seen == [2]  # both queued compiles done before timing, none compiled again
    assert len(jit.calls) == 2


def _softmax_kernel(ind: Any, rows: int, length: int) -> Any:
    from torchstrata.core import GraphBuilder, Level, TensorMeta

    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((rows, length), torch.float32))
    return ind.only_kernel(b.build([ind.softmax_last(b, x)]))


@pytest.mark.parametrize(("rows", "length", "tuned"), [(16, 1024, False), (512, 1024, True)])
def test_kernels_below_the_tuning_size_launch_one_configuration(
    ind: Any, rows: int, length: int, tuned: bool
) -> None:
    from torchstrata.inductor.codegen.triton.backend import TritonBackend

    kernel = _softmax_kernel(ind, rows, length)
    _, configs, sources = TritonBackend(interpret=False).generate(kernel, clusters=False)
    assert (len(configs) > 1) == tuned
    assert len(sources) == len({config.variant for config in configs})
    every = InductorOptions(tune_min_elements=0)
    _, all_configs, _ = TritonBackend(interpret=False, options=every).generate(kernel, False)
    assert len(all_configs) > 1 and all_configs[0] == configs[0]


def test_tune_min_elements_option() -> None:
    assert InductorOptions().tune_min_elements == 1 << 16
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="tune_min_elements"):
            InductorOptions(tune_min_elements=bad)
