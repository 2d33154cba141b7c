"""The generated Python launcher and how it calls kernels and extern ops."""
