"""Vectorized attribute-semantics kernels (SPEC sections 1-5, 8)."""
