"""Mutation testing: see run.py."""
