"""Policies: the YAML schema and loader, tenants and keys, engines, prices. The shared-store
adapters they are enforced with are ``policies.stores``."""
