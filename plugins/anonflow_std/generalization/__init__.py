"""Hierarchy-based generalization: the ``lattice`` search and the hierarchy builders."""
