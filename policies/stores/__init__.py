"""The shared-store adapters: the store seam (Redis or in process) and every typed store on
it: budgets, rate limits, the ledger, keys, audit, feedback, pooled sketches, stored
Responses, the prompt cache's storage. The one Redis error mapping is ``store_redis``."""
