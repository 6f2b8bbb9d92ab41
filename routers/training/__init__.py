"""Offline: fitting and evaluating the routing models and the cache verifier, and building
their data (``corpora``). The CLI runs these; nothing that serves imports them."""
