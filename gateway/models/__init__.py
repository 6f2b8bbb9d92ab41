"""``GET /v1/models``: what a key may ask for."""
