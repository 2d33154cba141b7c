"""Integration tests compile the same functions in many tests: the on-disk compiled-graph
cache is suspended for all but those marked ``graph_cache``, so that no test finds
entries an earlier test (or an earlier run) wrote where it expects a stage to run."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

import torchstrata.runtime as tsr


@pytest.fixture(autouse=True)
def _graph_cache_only_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    if request.node.get_closest_marker("graph_cache") is not None:
        yield
        return
    with tsr.graph_cache_suspended():
        yield


@pytest.fixture
def dynamo_reset_no_fallback() -> Iterator[None]:
    """Dynamo's caches reset before and after the test, and a fallback to eager an
    error: for the tests of graphs Dynamo hands the torchstrata backend."""
    torch.compiler.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
        yield
    torch.compiler.reset()


@pytest.fixture
def size_counts_no_fallback() -> Iterator[None]:
    """``size_lowering_stats()`` counted from zero, and a call run eagerly (a runner that
    failed) an error: for the tests of lowerings made once for many sizes."""
    tsr.reset_size_lowering_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", tsr.TorchstrataFallbackWarning)
        yield
