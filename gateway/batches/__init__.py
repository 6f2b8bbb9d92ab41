"""Batch jobs: OpenAI's Files and Batches APIs and Anthropic's Message Batches (the
endpoints, wire models, rendering), their intake, and the runner that runs every line
through the serving core at batch priority (docs/batches.md)."""
