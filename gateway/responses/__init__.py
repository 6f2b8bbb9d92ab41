"""The Responses API: ``/v1/responses`` and the stored Responses (endpoints, wire models,
translation, rendering, and the format that keeps them)."""
