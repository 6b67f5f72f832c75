"""Optimisation passes: IR in, IR out (each states what it needs and what it changes)."""
