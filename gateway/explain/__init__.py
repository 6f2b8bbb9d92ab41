"""``POST /v1/route``: a routing decision explained, without calling a model."""
