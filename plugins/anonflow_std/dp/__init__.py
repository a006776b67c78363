"""Differentially private releases: aggregates (counts, marginals, sums, means) with noise from
OpenDP's measurements (the ``dp`` extra). Each step states the loss it spends
(:meth:`anonflow.api.Plugin.privacy_loss`), which the engine charges to the store's budget ledger."""
