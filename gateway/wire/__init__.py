"""What every wire format shares: the format contract, SSE framing, hints (compat), common
fields and parsing, error bodies. Each format itself lives with its endpoint family."""
