"""The routing models at run time: the embedder, the complexity classifier, per-tier quality,
the objective and the tier decision. The cache verifier is ``routers.verifier``; offline
training and evaluation, which nothing at run time imports, ``routers.training``."""
