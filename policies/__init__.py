"""Policies: the YAML schema and loader, tenants and keys, prices, budgets, rate limits."""
