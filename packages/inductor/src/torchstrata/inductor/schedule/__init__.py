"""Lowering prims to index functions, fusion into kernels, and the plan of steps."""
