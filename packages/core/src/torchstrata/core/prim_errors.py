"""The error prim meta functions raise (its own module so every prim module can use it)."""


class PrimError(TypeError):
    """Arguments that a prim does not accept."""
