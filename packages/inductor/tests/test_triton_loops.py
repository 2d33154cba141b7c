"""Row loops of generated Triton code (``triton_loops``): which loads a pipelined loop
issues one tile ahead, and that the loop's text runs (under Triton's interpreter) to the
same values as the plain loop."""

from __future__ import annotations

import pytest
import torch

from torchstrata.inductor.codegen.triton.loops import block_loop, row_loop, tile_loop

triton = pytest.importorskip("triton")

TILE = [
    "rindex = {start}tl.arange(0, RBLOCK)[None, :]",
    "rmask = rindex < {length}",
    "r0 = rindex",
]
INNER = [
    "tmp0 = tl.load(buf_x + (r0 + xzero), xmask & rmask, other=0).to(tl.float32)",
    "tmp1 = tmp0 * 2.0",
    "tmp2 = tl.load(buf_w + ((tmp1 > 0).to(tl.int32) + rzero), xmask & rmask, other=0)",
    "tmp3 = tmp1 + tmp2",
]


def _tile(length: int) -> list[str]:
    return [line.replace("{length}", str(length)) for line in TILE]


def test_only_loads_of_nothing_the_tile_computes_move_ahead():
    lines = tile_loop(100, _tile(100), INNER, ["acc = acc + tmp3"], prefetch=True)
    text = "\n".join(lines)
    assert "ahead_tmp0 = tl.load(buf_x" in text and "tmp0 = ahead_tmp0.to(tl.float32)" in text
    assert "ahead_tmp2" not in text  # its address depends on tmp1, computed in the tile
    # the look-ahead tile is masked to the row, whatever the tile's own mask is
    assert "rindex = roffset + RBLOCK + tl.arange" in text and "rmask = rindex < 100" in text
    plain = tile_loop(100, _tile(100), INNER, ["acc = acc + tmp3"], prefetch=False)
    assert "ahead_" not in "\n".join(plain)
    assert plain == row_loop(
        100, [t.format(start="roffset + ") for t in _tile(100)] + INNER + ["acc = acc + tmp3"]
    )


def _module(length: int, prefetch: bool, reverse: bool) -> str:
    after = ["acc = acc * 0.5 + tmp3"]  # order-dependent: a wrong tile order shows
    loop = tile_loop(length, _tile(length), INNER, after, prefetch=prefetch, reverse=reverse)
    body = [
        "xmask = tl.full([1, 1], 1, tl.int1)",
        "xzero = tl.full([1, 1], 0, tl.int32)",
        "rzero = tl.full([1, RBLOCK], 0, tl.int32)",
        "acc = tl.full([1, RBLOCK], 0.0, tl.float32)",
        *loop,
        "tl.store(buf_out + tl.arange(0, RBLOCK)[None, :], acc)",
    ]
    return (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def kernel(buf_x, buf_w, buf_out, RBLOCK: tl.constexpr):\n"
        + "".join(f"    {line}\n" for line in body)
    )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [64, 100, 7])
def test_a_pipelined_loop_computes_what_the_plain_loop_does(tmp_path, monkeypatch, length, reverse):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import importlib.util

    x = torch.randn(length, dtype=torch.bfloat16)
    w = torch.tensor([3.0, -5.0])
    results = []
    for prefetch in (False, True):
        path = tmp_path / f"loop_{length}_{reverse}_{prefetch}.py"
        path.write_text(_module(length, prefetch, reverse))
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out = torch.empty(16)
        module.kernel[(1,)](x, w, out, 16)
        results.append(out)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    assert results[0].abs().sum() > 0


BLOCK = [
    "xindex = xp * 8 + {start}tl.arange(0, XBLOCK)[:, None]",
    "xmask = tl.full([XBLOCK, 1], 1, tl.int1)",
    "x0 = xindex",
]
ROW_INNER = [
    "tmp0 = tl.load(buf_x + (r0 + 4*x0), xmask & rmask, other=0).to(tl.float32)",
    "tmp1 = tmp0 * 2.0",
]


def test_a_block_loop_loads_the_next_rows_ahead_masked_to_the_kernels_rows():
    lines = block_loop(8, 16, BLOCK, ROW_INNER, ["acc = acc * 0.5 + tmp1"], prefetch=True)
    text = "\n".join(lines)
    assert lines[0] == "xindex = xp * 8 + tl.arange(0, XBLOCK)[:, None]"  # the first block
    assert "xindex = xp * 8 + xstep + XBLOCK + tl.arange" in text
    assert "xmask = xindex < 16" in text  # the last program's look-ahead reads nothing
    plain = block_loop(8, 16, BLOCK, ROW_INNER, ["acc = acc * 0.5 + tmp1"], prefetch=False)
    assert "ahead_" not in "\n".join(plain) and plain[0].startswith("for xstep")


@pytest.mark.parametrize("xblock", [1, 2, 8])
def test_a_pipelined_block_loop_computes_what_the_plain_loop_does(tmp_path, monkeypatch, xblock):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import importlib.util

    x = torch.randn(16, 4)
    results = []
    for prefetch in (False, True):
        after = ["acc = acc * 0.5 + tmp1"]  # order-dependent: a wrong block order shows
        loop = block_loop(8, 16, BLOCK, ROW_INNER, after, prefetch=prefetch)
        body = [
            "xp = tl.program_id(0)",
            "r0 = tl.arange(0, 4)[None, :]",
            "rmask = r0 < 4",
            "acc = tl.full([XBLOCK, 4], 0.0, tl.float32)",
            *loop,
            "tl.store(buf_out + xp * XBLOCK * 4 + tl.arange(0, XBLOCK)[:, None] * 4 + r0, acc)",
        ]
        source = (
            "import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def kernel(buf_x, buf_out, XBLOCK: tl.constexpr):\n"
            + "".join(f"    {line}\n" for line in body)
        )
        path = tmp_path / f"block_{xblock}_{prefetch}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out = torch.empty(2, xblock, 4)
        module.kernel[(2,)](x, out, xblock)
        results.append(out)
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)
    assert results[0].abs().sum() > 0
