"""``POST /v1/embeddings``: endpoints, wire models, and the run of one embeddings call."""
