"""Guardrails: PII and secrets found, redacted, blocked or kept local (docs/guardrails.md)."""
