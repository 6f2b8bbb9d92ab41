"""HTTP routes, one module per endpoint family; each route is a few lines over ``serving``."""
