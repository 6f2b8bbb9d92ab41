"""The builders of the vendored data under ``data/`` (each a ``python -m`` command)."""
