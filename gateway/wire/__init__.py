"""What every wire format shares: the format contract, SSE framing, hints (compat), common
fields and parsing, error bodies. Each generation format lives with its endpoint family;
the embeddings request, which the core's embeddings entrance takes, is here."""
