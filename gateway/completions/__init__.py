"""``POST /v1/completions`` (legacy text completions): endpoints, wire models, rendering."""
