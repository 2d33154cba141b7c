"""Complex tensors through the whole compiler: ops that touch complex values stay ATen
calls (prims are real-valued), named with their reason in explain(); results match
eager in dtype, shape and value, in the forward and in training."""

from __future__ import annotations

import warnings

import pytest
import torch

import torchstrata.runtime as rt
from torchstrata.capture import graph_break
from torchstrata.core import COMPLEX_REASON, OpKind

C64 = torch.complex64


@pytest.fixture(autouse=True)
def _fresh():
    rt.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", rt.TorchstrataFallbackWarning)
        yield
    rt.reset()


def _real(*shape):
    return torch.randn(*shape)


def _complex(*shape):
    return torch.randn(*shape, dtype=C64)


def abs_plus_real(x, z):
    return x + z.abs()


def angle_real_imag(x, z):
    return z.angle() * x, z.real + z.imag, torch.real(z) - x


def parts(x, z):
    return z.real * 2 + z.imag, z.conj().imag, z.imag - x


def views(x, z):
    return torch.view_as_real(z) * 2, torch.view_as_complex(torch.stack([x, x + 1], -1))


def view_of_argument(pairs, z):
    return torch.view_as_complex(pairs), torch.view_as_real(z)


def conjugates(x, z):
    return z.conj() * z, torch.conj_physical(z) + x, z.conj().imag


def arithmetic(x, z):
    w = z * (x + 1) / (z + 2j)
    return w, w - z * 1j, z**2, torch.reciprocal(z + 3)


def promotion(x, z):
    return x + z, x.double() * z, torch.complex(x, x * 2)


def reductions(x, z):
    return z.sum(0), z.mean(), (z * x).prod(-1), torch.linalg.vector_norm(z, dim=1)


def casts(x, z):
    return z.to(torch.complex128), x.to(C64), z.abs().to(torch.float64), torch.polar(x.abs(), x)


def math(x, z):
    return torch.exp(z), torch.log(z + 4), torch.sqrt(z), torch.sgn(z), torch.tanh(z)


def matmul(x, z):
    return z @ z.mT + x[:, :4].to(C64)


def creation(x, z):
    return (
        torch.zeros_like(z) + 1j,
        torch.ones(3, dtype=C64),
        torch.full_like(z, 2 + 3j),
        x * 1j,
        x == 1j,
    )


CASES = [
    abs_plus_real,
    parts,
    angle_real_imag,
    views,
    conjugates,
    arithmetic,
    promotion,
    reductions,
    casts,
    math,
    matmul,
    creation,
]


def _assert_same(actual, expected):
    if isinstance(expected, tuple):
        assert type(actual) is tuple and len(actual) == len(expected)
        for got, want in zip(actual, expected, strict=True):
            _assert_same(got, want)
        return
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    torch.testing.assert_close(actual, expected)


def _assert_prims_are_real(report):
    for graph in report.prims_graphs:
        assert graph is not None
        for node in graph.nodes:
            if node.op.kind is OpKind.PRIMS:
                metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
                assert not any(m.dtype.is_complex for m in metas if m is not None), node


@pytest.mark.parametrize("fn", CASES, ids=lambda fn: fn.__name__)
def test_forward_matches_eager_dtypes_and_values(fn):
    compiled = rt.compile(fn)
    for _ in range(2):
        x, z = _real(4, 5), _complex(4, 5)
        _assert_same(compiled(x, z), fn(x, z))
    report = rt.explain(compiled, _real(4, 5), _complex(4, 5))
    _assert_prims_are_real(report)
    assert report.eager_reasons
    assert all(reason.endswith(COMPLEX_REASON) for reason in report.eager_reasons)


def test_complex_abs_is_real_and_the_real_part_still_fuses():
    x, z = _real(8), _complex(8)
    report = rt.explain(lambda x, z: (x * 2 + z.abs()).relu(), x, z)
    (graph,) = report.prims_graphs
    assert [n.op.name for n in graph.nodes if n.op.kind is OpKind.ATEN] == ["aten.abs.default"]
    assert len(report.kernels) == 1 and report.kernels[0].backend != "extern"
    assert "aten.abs.default: " + COMPLEX_REASON in str(report)


def test_views_of_arguments_alias_them_in_their_own_dtype():
    pairs, z = _real(3, 2), _complex(5)
    as_complex, as_real = rt.compile(view_of_argument)(pairs, z)
    assert as_complex.dtype == C64 and as_real.dtype == torch.float32
    assert as_complex.data_ptr() == pairs.data_ptr() and as_real.data_ptr() == z.data_ptr()
    as_complex.mul_(2)  # a write through the view shows in the argument, as in eager
    torch.testing.assert_close(torch.view_as_real(as_complex), pairs)
    _assert_same(as_real, torch.view_as_real(z))


def real_loss_through_complex(x, w):
    z = torch.view_as_complex(x) * torch.complex(w, -w)
    return (z.abs() ** 2 + z.angle()).sum() + (x * w[:, None]).sum()


def complex_leaf(z, x):
    return (z * z.conj() + x).real.sum() + (z.abs() * x).sum()


@pytest.mark.parametrize(
    ("fn", "make"),
    [
        (real_loss_through_complex, lambda: (_real(6, 2), _real(6))),
        (complex_leaf, lambda: (_complex(6), _real(6))),
    ],
    ids=["real-leaves", "complex-leaf"],
)
def test_training_gradients_match_eager(fn, make):
    compiled = rt.compile(fn)
    for _ in range(2):
        args = make()
        mine = [a.clone().requires_grad_() for a in args]
        theirs = [a.clone().requires_grad_() for a in args]
        actual, expected = compiled(*mine), fn(*theirs)
        _assert_same(actual, expected)
        actual.backward()
        expected.backward()
        for got, want in zip(mine, theirs, strict=True):
            _assert_same(got.grad, want.grad)


def imag_of_conjugate(z):
    return torch.imag(z.conj()) * 2, torch.imag(z.conj()), z.conj()


def conj_view_then_break(z):
    w = z.conj()
    graph_break()  # w, a conjugate view of the argument, is live across it
    return w.imag, w.real * 2


def test_lazy_conjugate_and_negative_bits_are_kept(capsys):
    compiled = rt.compile(imag_of_conjugate)
    for _ in range(2):
        z = _complex(4, 5)
        actual, expected = compiled(z), imag_of_conjugate(z)
        _assert_same(actual, expected)
        assert actual[2].is_conj() and actual[2].data_ptr() == z.data_ptr()
    z = _complex(4, 5)
    _assert_same(rt.compile(conj_view_then_break)(z), conj_view_then_break(z))
    capsys.readouterr()


def double(x):
    return x * 2


def test_inputs_with_lazy_bits_fail_the_guards_and_run_eagerly():
    compiled = rt.compile(double)
    z = _complex(6)
    for plain in (z.imag.clone(), z):
        _assert_same(compiled(plain), double(plain))
    lazy = z.conj().imag  # the graphs above were traced without the bit
    with pytest.warns(rt.TorchstrataFallbackWarning, match="lazy conjugate or negative"):
        actual = compiled(lazy)
    _assert_same(actual, double(lazy))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.TorchstrataFallbackWarning)
        _assert_same(compiled(z.conj()), double(z.conj()))
