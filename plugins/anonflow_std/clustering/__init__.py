"""Clustering algorithms: (alpha,k)-GCA and (alpha_i,k)-GCA (``gca``) and L-clustering (``lclustering``)."""
