"""Batch files: kept in the shared store up to ``batches.store_max_bytes``, in the S3
bucket above that, one tenant's bytes within its limit; read back and deleted from where
they are. A file that cannot be kept leaves nothing behind (a bucket object whose record
was refused is deleted again)."""

from __future__ import annotations

import os
import time

from gateway.errors import InvalidRequest, NotFound, PayloadTooLarge
from policies.batches_spec import BatchesConfig
from policies.stores.batch_bucket import Bucket
from policies.stores.batch_records import BatchStore, FileRecord

UNLIMITED = 1 << 62  # what a batch writes (its output) is kept whatever the tenant holds


def new_file_id() -> str:
    return f"file-{os.urandom(12).hex()}"


class Files:
    """The files of the tenants, over the batch store and the bucket (if any)."""

    def __init__(self, spec: BatchesConfig, store: BatchStore, bucket: Bucket | None) -> None:
        self.spec, self.store, self.bucket = spec, store, bucket

    async def keep(
        self,
        tenant: str,
        filename: str,
        purpose: str,
        content: bytes,
        ttl_s: float,
        file_id: str | None = None,
    ) -> FileRecord:
        """Keep ``content``; an input file (no ``file_id``) counts against the tenant's
        bytes and the size limit, a batch's output does not."""
        output = file_id is not None
        if not output and len(content) > self.spec.file_limit:
            raise PayloadTooLarge(
                f"the file is {len(content)} bytes; the limit is {self.spec.file_limit}",
                param="file",
            )
        now = int(time.time())
        large = len(content) > self.spec.store_max_bytes and self.bucket is not None
        record = FileRecord(
            file_id or new_file_id(),
            tenant,
            len(content),
            now,
            filename,
            purpose,
            now + int(ttl_s),
            "s3" if large else "store",
        )
        limit = UNLIMITED if output else self.spec.limits_for(tenant).file_bytes
        if large:
            assert self.bucket is not None
            key = self.bucket.key(tenant, record.id)
            await self.bucket.put(key, content)
            if not await self.store.add_file(record, None, limit):
                await self.bucket.delete(key)
                raise _over(limit)
        elif not await self.store.add_file(record, content, limit):
            raise _over(limit)
        return record

    async def get(self, tenant: str, file_id: str) -> FileRecord:
        record = await self.store.file(tenant, file_id)
        if record is None:
            raise missing(file_id)
        return record

    async def content(self, record: FileRecord) -> bytes:
        if record.location == "s3":
            if self.bucket is None:
                raise NotFound(f"the file {record.id}'s bucket is not configured")
            found = await self.bucket.get(self.bucket.key(record.tenant, record.id))
        else:
            found = await self.store.file_content(record.tenant, record.id)
        if found is None:
            raise missing(record.id)
        return found

    async def remove(self, tenant: str, file_id: str) -> FileRecord | None:
        record = await self.store.remove_file(tenant, file_id)
        if record is not None and record.location == "s3" and self.bucket is not None:
            await self.bucket.delete(self.bucket.key(tenant, file_id))
        return record


def missing(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id}", param="file_id", code="not_found")


def _over(limit: int) -> InvalidRequest:
    return InvalidRequest(
        f"the tenant's files would pass their limit of {limit} bytes; delete some first",
        param="file",
        code="storage_limit_exceeded",
    )
