"""The registries of the state seams: the YAML picks a store, the store's ``kind`` picks
the ledger, budget and rate-limit implementations built on it.

``redis_url`` absent → ``memory``; set → ``redis`` (``redis_cluster: true``: the URL is a
seed node of a cluster; same implementations, same scripts, one slot per script).
Factories import their implementation only when a config uses it.

Adding a typed sub-store on the same owner is one entry per kind, as ``KEY_STORES``
and ``AUDIT_LOGS`` show: a memory implementation and a Redis one that takes its prefix
from ``store.keys(name)`` and runs every call through ``store.call`` / ``store.script``
(docs/redis-keys.md, "Adding a sub-store").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from policies.schema import GatewayConfig
from policies.stores.audit import AuditLog
from policies.stores.batch_records import BatchStore
from policies.stores.budget import BudgetStore
from policies.stores.feedback import FeedbackStore
from policies.stores.keys import KeyStore
from policies.stores.ledger import Ledger
from policies.stores.ratelimit import RateLimiter
from policies.stores.sessions import SessionStore
from policies.stores.shares import ShareStore
from policies.stores.store import MemoryStore, Store
from policies.stores.store_redis import RedisStore

log = logging.getLogger(__name__)

T = TypeVar("T")


class UnknownStoreKind(KeyError):
    pass


def open_store(config: GatewayConfig) -> Store:
    """The one owner of the state connection for this process."""
    if config.redis_url:
        return RedisStore(
            config.redis_url,
            root=config.redis_prefix,
            cluster=config.redis_cluster,
            timeout_s=config.redis_timeout_s,
            max_connections=config.redis_max_connections,
            coalesce=config.redis_pipelining,
        )
    log.warning(
        "no redis_url configured: state lives in this process only "
        "(caches, budgets and rate limits are NOT shared between replicas)"
    )
    return MemoryStore(root=config.redis_prefix)


def _memory_ledger(config: GatewayConfig, store: Store) -> Ledger:
    from policies.stores.ledger import MemoryLedger

    kept = config.ledger
    return MemoryLedger(max_events=kept.memory_events, retention_days=kept.retention_days)


def _redis_ledger(config: GatewayConfig, store: Store) -> Ledger:
    from policies.stores.ledger_redis import RedisLedger

    kept = config.ledger
    return RedisLedger(
        redis_owner(store), max_events=kept.stream_max_events, retention_days=kept.retention_days
    )


def _memory_budgets(config: GatewayConfig, store: Store, ledger: Ledger) -> BudgetStore:
    from policies.stores.budget_memory import MemoryBudgetStore
    from policies.stores.ledger import MemoryLedger

    return MemoryBudgetStore(cast(MemoryLedger, ledger), ttl_s=config.budgets.reservation_ttl_s)


def _redis_budgets(config: GatewayConfig, store: Store, ledger: Ledger) -> BudgetStore:
    from policies.stores.budget_redis import RedisBudgetStore
    from policies.stores.ledger_redis import RedisLedger

    return RedisBudgetStore(cast(RedisLedger, ledger), ttl_s=config.budgets.reservation_ttl_s)


def _memory_limiter(config: GatewayConfig, store: Store) -> RateLimiter:
    from policies.stores.ratelimit import MemoryRateLimiter

    return MemoryRateLimiter()


def _redis_limiter(config: GatewayConfig, store: Store) -> RateLimiter:
    from policies.stores.ratelimit_redis import RedisRateLimiter

    return RedisRateLimiter(redis_owner(store))


def _memory_keys(store: Store) -> KeyStore:
    from policies.stores.keys import MemoryKeyStore

    return MemoryKeyStore()


def _redis_keys(store: Store) -> KeyStore:
    from policies.stores.keys_redis import RedisKeyStore

    return RedisKeyStore(redis_owner(store))


def _memory_audit(store: Store) -> AuditLog:
    from policies.stores.audit import MemoryAuditLog

    return MemoryAuditLog()


def _redis_audit(store: Store) -> AuditLog:
    from policies.stores.audit import RedisAuditLog

    return RedisAuditLog(redis_owner(store))


def _memory_shares(store: Store) -> ShareStore:
    from policies.stores.shares import MemoryShareStore

    return MemoryShareStore()


def _redis_shares(store: Store) -> ShareStore:
    from policies.stores.shares import RedisShareStore

    return RedisShareStore(redis_owner(store))


def _memory_feedback(store: Store) -> FeedbackStore:
    from policies.stores.feedback import MemoryFeedbackStore

    return MemoryFeedbackStore()


def _redis_feedback(store: Store) -> FeedbackStore:
    from policies.stores.feedback_redis import RedisFeedbackStore

    return RedisFeedbackStore(redis_owner(store))


def _memory_batches(store: Store) -> BatchStore:
    from policies.stores.batch_memory import MemoryBatchStore

    return MemoryBatchStore()


def _redis_batches(store: Store) -> BatchStore:
    from policies.stores.batch_redis import RedisBatchStore

    return RedisBatchStore(redis_owner(store))


def _memory_sessions(store: Store) -> SessionStore:
    from policies.stores.sessions import MemorySessionStore

    return MemorySessionStore()


def _redis_sessions(store: Store) -> SessionStore:
    from policies.stores.sessions_redis import RedisSessionStore

    return RedisSessionStore(redis_owner(store))


LEDGERS: Mapping[str, Callable[[GatewayConfig, Store], Ledger]] = {
    "memory": _memory_ledger,
    "redis": _redis_ledger,
}
BUDGET_STORES: Mapping[str, Callable[[GatewayConfig, Store, Ledger], BudgetStore]] = {
    "memory": _memory_budgets,
    "redis": _redis_budgets,
}
RATE_LIMITERS: Mapping[str, Callable[[GatewayConfig, Store], RateLimiter]] = {
    "memory": _memory_limiter,
    "redis": _redis_limiter,
}


KEY_STORES: Mapping[str, Callable[[Store], KeyStore]] = {
    "memory": _memory_keys,
    "redis": _redis_keys,
}
AUDIT_LOGS: Mapping[str, Callable[[Store], AuditLog]] = {
    "memory": _memory_audit,
    "redis": _redis_audit,
}

SHARE_STORES: Mapping[str, Callable[[Store], ShareStore]] = {
    "memory": _memory_shares,
    "redis": _redis_shares,
}

FEEDBACK_STORES: Mapping[str, Callable[[Store], FeedbackStore]] = {
    "memory": _memory_feedback,
    "redis": _redis_feedback,
}

BATCH_STORES: Mapping[str, Callable[[Store], BatchStore]] = {
    "memory": _memory_batches,
    "redis": _redis_batches,
}

SESSION_STORES: Mapping[str, Callable[[Store], SessionStore]] = {
    "memory": _memory_sessions,
    "redis": _redis_sessions,
}


def pick(registry: Mapping[str, T], seam: str, kind: str) -> T:
    try:
        return registry[kind]
    except KeyError:
        known = sorted(registry)
        raise UnknownStoreKind(f"no {seam} for store {kind!r}; known: {known}") from None


def open_ledger(config: GatewayConfig, store: Store) -> Ledger:
    return pick(LEDGERS, "ledger", store.kind)(config, store)


def open_budget_store(config: GatewayConfig, store: Store, ledger: Ledger) -> BudgetStore:
    return pick(BUDGET_STORES, "budget store", store.kind)(config, store, ledger)


def open_rate_limiter(config: GatewayConfig, store: Store) -> RateLimiter:
    return pick(RATE_LIMITERS, "rate limiter", store.kind)(config, store)


def open_key_store(store: Store) -> KeyStore:
    return pick(KEY_STORES, "key store", store.kind)(store)


def open_audit(store: Store) -> AuditLog:
    return pick(AUDIT_LOGS, "audit log", store.kind)(store)


def open_share_store(store: Store) -> ShareStore:
    """The score sketches behind ``routing.target_share``, pooled by every replica."""
    return pick(SHARE_STORES, "share store", store.kind)(store)


def open_feedback_store(store: Store) -> FeedbackStore:
    """Records, labels and refits of ``routing.feedback``, shared by every replica."""
    return pick(FEEDBACK_STORES, "feedback store", store.kind)(store)


def open_batch_store(store: Store) -> BatchStore:
    """Files, batches, their lines and the shared line queue (``/v1/batches``)."""
    return pick(BATCH_STORES, "batch store", store.kind)(store)


def open_session_store(store: Store) -> SessionStore:
    """Agent sessions (``routing.sessions``): state, signals and replicas, per session."""
    return pick(SESSION_STORES, "session store", store.kind)(store)


def redis_owner(store: Store) -> RedisStore:
    """The Redis owner behind a store of kind ``redis`` (registry entries only)."""
    if not isinstance(store, RedisStore):
        raise UnknownStoreKind(f"store {store.kind!r} is not a Redis store")
    return store
