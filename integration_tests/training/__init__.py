"""Training through the whole pipeline: autograd, decomp and codegen against eager."""
