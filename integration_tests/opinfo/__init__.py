"""OpInfo sweep: PyTorch's OpInfo samples through aot -> decompose -> the reference interpreter."""
