"""Model definitions (random init, nothing downloaded) used by the M workloads."""
