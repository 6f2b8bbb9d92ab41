"""Routing in the gateway: the tier for each request, and what it learns from traffic."""
