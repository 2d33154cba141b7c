"""The loop IR: value expressions, index algebra, kernel descriptions and their printout."""
