"""The prompt cache's storage: key layout, the in-process store, Redis 7 (a stream-synced
local index) and Redis 8 (vector sets)."""
