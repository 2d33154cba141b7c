"""Differential fuzzing of whole programs: eager against compiled (see programs.py)."""
