"""``POST /v1/embeddings``: the HTTP endpoint over the core's embeddings entrance
(``ServingCore.embed``; its wire models: ``gateway.wire.embeddings``)."""
