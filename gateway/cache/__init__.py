"""The shared prompt cache: exact and semantic, isolated per tenant."""
