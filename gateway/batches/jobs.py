"""A tenant's batches, as every batch route reads them: found by id within the tenant
and the API that made them, cancelled, and the key their lines run as."""

from __future__ import annotations

import time

from starlette.requests import Request

from gateway.batches.file_endpoints import files_of
from gateway.batches.finish import finalize
from gateway.edge.http import TenantCall, tenant_key
from gateway.errors import NotFound
from policies.stores.batch_records import CANCELLING, IN_PROGRESS, VALIDATING, BatchRecord
from policies.tenants import hash_key


def key_digest(request: Request) -> str:
    """The caller's key, as its lines will be run by (``KeyDirectory.by_digest``)."""
    return hash_key((tenant_key(request) or "").strip())


async def owned(call: TenantCall, batch_id: str, api: str) -> BatchRecord:
    """The tenant's batch of this API (another tenant's, or the other API's, is a 404)."""
    record = await call.core.parts.batches.batch(call.principal.tenant, batch_id)
    if record is None or record.api != api:
        raise NotFound(f"No such batch: {batch_id}", param="batch_id", code="not_found")
    return record


async def cancel(call: TenantCall, record: BatchRecord) -> BatchRecord:
    """``cancelling`` (its queued lines end as cancelled, running ones finish), or at
    once ``cancelled`` when nothing is left to run."""
    store, now = call.core.parts.batches, int(time.time())
    tenant = call.principal.tenant
    moved, _ = await store.move(tenant, record.id, [VALIDATING, IN_PROGRESS], CANCELLING, now)
    if moved is None:
        raise NotFound(f"No such batch: {record.id}", param="batch_id", code="not_found")
    if moved.status == CANCELLING and moved.done >= moved.total:
        moved = await finalize(files_of(call), call.core.config.batches, moved, now) or moved
    return moved
