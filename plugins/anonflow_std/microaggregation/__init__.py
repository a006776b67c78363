"""Microaggregation: the MDAV family (``mdav``, ``v-mdav``, ``grav``, ``v-grav``, ``refine``; kernels,
grey similarity, local search) and ``maasae``."""
