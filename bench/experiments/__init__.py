"""ML experiments: variants of the routing models and the cache verifier, side by side."""
