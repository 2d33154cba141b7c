"""strata_numpy_backend: an inductor backend that runs fused kernels with NumPy."""

from strata_numpy_backend.backend import NumpyBackend

__all__ = ["NumpyBackend"]
