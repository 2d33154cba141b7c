"""The C++ backend: kernels as plain C++ with OpenMP, built and loaded with ctypes."""
