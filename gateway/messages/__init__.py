"""Anthropic Messages: ``/v1/messages`` and ``count_tokens`` (endpoints, wire models,
translation, rendering and Anthropic's error shape)."""
