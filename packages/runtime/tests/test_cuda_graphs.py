"""``mode="reduce-overhead"``: inference graphs recorded as CUDA graphs
(``cuda_graphs.py``). The recording itself needs a GPU; the choices around it do not."""

from __future__ import annotations

import warnings
from typing import ClassVar

import pytest
import torch
from torch import nn

import torchstrata.runtime as rt
from torchstrata.core import GraphBuilder, Level, TensorMeta, aten, int_size_carrier, prim
from torchstrata.runtime import cuda_graphs
from torchstrata.runtime.cuda_graphs import CudaGraphed, draws_random_numbers
from torchstrata.runtime.fallback import TorchstrataFallbackWarning, clear_warnings

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _graph(random: str | None):
    b = GraphBuilder(Level.PRIMS)
    x = b.input("x", TensorMeta((4,), torch.float32))
    y = b.call(prim("mul"), x, 2.0)
    if random == "prims":
        y = b.call(prim("add"), y, b.call(prim("rand"), (4,), 7, 0, torch.float32, x.meta.device))
    elif random == "aten":
        y = b.call(aten("bernoulli.p"), y, 0.5)
    elif random in ("attention", "attention dropout"):
        q = b.call(prim("reshape"), y, (1, 1, 1, 4))
        dropout = 0.1 if random == "attention dropout" else 0.0
        attention = aten("_scaled_dot_product_efficient_attention.default")
        out = b.call(attention, q, q, q, None, False, dropout)
        y = b.call(prim("reshape"), b.getitem(out, 0), (4,))
    return b.build([y])


@pytest.mark.parametrize(
    ("random", "draws"),
    [
        (None, False),
        ("prims", True),
        ("aten", True),
        ("attention", False),  # seeded, but without dropout it draws nothing
        ("attention dropout", True),
    ],
)
def test_graphs_that_draw_random_numbers_are_told_apart(random, draws):
    assert draws_random_numbers(_graph(random)) is draws
    assert draws_random_numbers(None)  # unknown: assume it does


def test_cpu_inputs_run_without_a_graph_and_say_why():
    clear_warnings()
    graphed = CudaGraphed(lambda x: (x * 2,), "a test graph")
    with pytest.warns(TorchstrataFallbackWarning, match="not a CUDA tensor"):
        (out,) = graphed(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    assert graphed.given_up and graphed.graph is None


def test_an_int_arguments_size_carrier_is_no_reason_to_give_up():
    # an int argument made symbolic arrives as a CPU size carrier (decision 0330) beside
    # the CUDA inputs; no kernel reads it, so the warm-up calls go on to a recording
    clear_warnings()
    graphed = CudaGraphed(lambda n: (n.shape[0],), "a test graph")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TorchstrataFallbackWarning)
        for _ in range(cuda_graphs.WARMUP_CALLS):
            assert graphed(int_size_carrier(5)) == (5,)
    assert not graphed.given_up and graphed.calls == cuda_graphs.WARMUP_CALLS
    with pytest.warns(TorchstrataFallbackWarning, match="not a CUDA tensor"):
        CudaGraphed(lambda n: (n,), "another")(torch.ones(5, dtype=torch.uint8))


def test_on_the_cpu_the_mode_changes_nothing():
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    compiled = rt.compile(model, mode="reduce-overhead")
    x = torch.randn(2, 8)
    with torch.no_grad(), warnings.catch_warnings():
        # (with the runtime installed alone, other warnings say which stages are missing)
        warnings.filterwarnings("error", ".*CUDA graph", TorchstrataFallbackWarning)
        for _ in range(4):
            torch.testing.assert_close(compiled(x), model(x))


class Decoder(nn.Module):
    """A tiny decode step: a projection, a static cache updated in place, SDPA."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 48)
        self.register_buffer("k_cache", torch.zeros(32, 16))
        self.register_buffer("v_cache", torch.zeros(32, 16))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q, k, v = self.proj(x).split(16, dim=-1)
        keys = self.k_cache.index_copy_(0, pos, k)
        values = self.v_cache.index_copy_(0, pos, v)
        visible = torch.arange(32, device=x.device) <= pos
        out = torch.nn.functional.scaled_dot_product_attention(
            q[None], keys[None], values[None], attn_mask=visible[None, None]
        )  # a seeded op, without dropout
        return torch.nn.functional.gelu(out[0])


@cuda
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_decode_steps_replay_and_match_eager(monkeypatch, mode):
    replays = []
    original = CudaGraphed._replay

    def counting(self, inputs):
        replays.append(1)
        return original(self, inputs)

    monkeypatch.setattr(CudaGraphed, "_replay", counting)
    torch.manual_seed(0)
    model = Decoder().cuda()
    reference = Decoder().cuda()
    reference.load_state_dict(model.state_dict())
    compiled = rt.compile(model, mode=mode)
    results = []
    with torch.no_grad():
        for step in range(8):  # new input tensors every step: copied into the graph's
            x = torch.randn(1, 16, device="cuda")
            pos = torch.tensor([step], device="cuda")
            got = compiled(x, pos)
            want = reference(x, pos)
            results.append((got, want))
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(model.k_cache, reference.k_cache)
            torch.testing.assert_close(model.v_cache, reference.v_cache)
    assert len(replays) == 8 - cuda_graphs.WARMUP_CALLS
    for got, want in results:  # earlier results are not overwritten by later replays
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@cuda
def test_a_stable_input_that_moves_runs_without_the_graph():
    def f(x, w):
        return torch.relu(x @ w) * 2

    compiled = rt.compile(f, mode="reduce-overhead")
    x, w = torch.randn(4, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(compiled(x, w), f(x, w))
        other = torch.randn(8, 8, device="cuda")  # same shape, another address
        torch.testing.assert_close(compiled(x, other), f(x, other))
        x2 = torch.randn(4, 8, device="cuda")
        torch.testing.assert_close(compiled(x2, other), f(x2, other))


@cuda
def test_a_graph_drawing_random_numbers_is_not_recorded():
    clear_warnings()

    def f(x):
        return x + torch.rand_like(x)

    compiled = rt.compile(f, mode="reduce-overhead")
    x = torch.zeros(1000, device="cuda")
    with torch.no_grad(), pytest.warns(TorchstrataFallbackWarning, match="random numbers"):
        draws = [compiled(x) for _ in range(5)]
    assert not torch.equal(draws[-1], draws[-2])


@cuda
def test_stable_inputs_that_keep_moving_end_the_recordings():
    clear_warnings()
    graphed = CudaGraphed(lambda x, w: (x @ w,), "a test graph")
    x = torch.randn(4, 8, device="cuda")
    with pytest.warns(TorchstrataFallbackWarning, match="moved after"):
        for _ in range(cuda_graphs.MAX_RECORDINGS + 1):
            w = torch.randn(8, 8, device="cuda")  # a new address: the last graph is dropped
            for _ in range(cuda_graphs.WARMUP_CALLS + 1):  # then recorded again
                (out,) = graphed(x, w)
                torch.testing.assert_close(out, x @ w)
    assert graphed.given_up and graphed.recordings == cuda_graphs.MAX_RECORDINGS


class _Recorder:
    """Stands in for :class:`CudaGraphed` (no GPU): counts the calls of each size."""

    made: ClassVar[list[_Recorder]] = []

    def __init__(self, fn, name):
        self.fn, self.name, self.calls = fn, name, 0
        _Recorder.made.append(self)

    def __call__(self, *inputs):
        self.calls += 1
        return self.fn(*inputs)


def test_a_lowering_for_many_sizes_records_one_graph_per_size(caplog):
    _Recorder.made = []
    graphs = cuda_graphs.SizeGraphs(lambda x, w: (x @ w,), record=_Recorder)
    w = torch.randn(8, 3)
    with caplog.at_level("INFO", logger="torchstrata.runtime"):
        for rows in (5, 9, 5, 2, 9, 5):
            x = torch.randn(rows, 8)
            (out,) = graphs(x, w)
            torch.testing.assert_close(out, x @ w)
    assert [r.calls for r in _Recorder.made] == [3, 2, 1]  # sizes 5, 9, 2 in order
    assert "[9, 8], [8, 3]" in _Recorder.made[1].name
    news = [r.getMessage() for r in caplog.records if "of their own" in r.getMessage()]
    assert len(news) == 3 and "[2, 8]" in news[-1] and "size 3 of at most" in news[-1]


def test_sizes_beyond_the_cap_run_without_a_graph_and_say_so():
    clear_warnings()
    _Recorder.made = []
    graphs = cuda_graphs.SizeGraphs(lambda x: (x + 1,), max_graphs=2, record=_Recorder)
    graphs(torch.zeros(2))
    graphs(torch.zeros(3))
    with pytest.warns(TorchstrataFallbackWarning, match="for 2 sizes: new sizes"):
        (out,) = graphs(torch.zeros(4))
    torch.testing.assert_close(out, torch.ones(4))
    assert len(_Recorder.made) == 2 and len(graphs.graphs) == 2
    graphs(torch.zeros(2))  # a recorded size keeps its graph
    assert _Recorder.made[0].calls == 2


@pytest.mark.parametrize(
    ("device", "mode", "graphed"),
    [
        ("cuda", "reduce-overhead", True),
        ("cuda", "max-autotune", True),
        ("cuda", None, False),
        ("cuda", "default", False),
        ("cpu", "reduce-overhead", False),  # CUDA graphs only: the mode changes nothing
    ],
)
def test_which_lowerings_for_many_sizes_record_graphs(device, mode, graphed):
    def fn(x):
        return (x * 2,)

    made = cuda_graphs.graphed_per_size(fn, _graph(None), torch.device(device), mode)
    assert isinstance(made, cuda_graphs.SizeGraphs) is graphed
    assert made is fn or graphed


def test_a_lowering_for_many_sizes_that_draws_random_numbers_records_none():
    clear_warnings()

    def fn(x):
        return (x,)

    with pytest.warns(TorchstrataFallbackWarning, match="random numbers"):
        made = cuda_graphs.graphed_per_size(
            fn, _graph("prims"), torch.device("cuda"), "reduce-overhead"
        )
    assert made is fn
