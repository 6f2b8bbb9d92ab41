"""The tier decision, whole: the models (embedder, complexity classifier, per-tier
quality), the rules (decision, objective, sessions, escalation) and their stateful shells
(``router``: what routing uses, built once; ``live_sessions``, ``objective_lambda``,
``target_share``: sessions, λ and shares from traffic, pooled through the store), side by
side. It imports nothing of the gateway (``tests/gateway/test_layers.py``): the serving
core reaches it through ``gateway.core.route``. The cache verifier is
``routers.verifier``; offline training and evaluation, which nothing at run time imports,
``routers.training``."""
