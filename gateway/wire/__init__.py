"""OpenAI wire models, one module per endpoint family."""
