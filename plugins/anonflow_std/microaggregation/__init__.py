"""Microaggregation: the MDAV family (``mdav``, ``v-mdav``, ``grav``, ``v-grav``, ``refine``; the
loops, the similarity they are written against, its Euclidean and grey implementations, local
search) and ``maasae``."""
