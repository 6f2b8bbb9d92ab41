"""The serving core: one run of a request, whatever its wire format."""
