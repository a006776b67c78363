"""Privacy models: metrics (category ``privacy``) that check a published table against a model,
and the per-class counting they share."""
