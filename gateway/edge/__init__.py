"""The edge: the HTTP server, request plumbing, auth dependencies, error pages."""
