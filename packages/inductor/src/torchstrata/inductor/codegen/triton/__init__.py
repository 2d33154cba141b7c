"""The Triton backend, with the rewrites only Triton kernels get."""
