"""Privacy models: metrics (category ``privacy``) that check a published table against a model
(the per-class counting they share with other families is in :mod:`anonflow_std.common`)."""
