"""Routing: the embedder, the complexity classifier and the tier decision."""
