"""Perturbative disclosure control: algorithms that change values instead of coarsening them
(PRAM, noise, rank swapping, shuffling, top/bottom coding, global recoding). Each returns every
record as a class of its own and declares what it changed (:meth:`anonflow.api.Algorithm.perturbs`)."""
