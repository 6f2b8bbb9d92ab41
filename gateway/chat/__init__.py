"""``POST /v1/chat/completions``: endpoints, wire models and translation, rendering."""
