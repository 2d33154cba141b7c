"""Graph rewrites before lowering, each a named core GraphPass."""
