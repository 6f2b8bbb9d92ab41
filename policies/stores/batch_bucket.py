"""Large batch files in an S3-compatible bucket (``batches.s3``; the ``s3`` extra).

A file larger than ``batches.store_max_bytes`` is put here and its record (in the
shared store) says so; the bytes are read back, and deleted, by the same key. boto3 is
synchronous: each call runs in a worker thread, never on the event loop. Every failure
of the bucket (unreachable, refused, a missing bucket) is ``StoreUnavailable`` here,
once, like a Redis failure.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar

from policies.batches_spec import S3Config
from policies.stores.store import StoreUnavailable

T = TypeVar("T")


class Bucket:
    def __init__(self, spec: S3Config) -> None:
        self.spec = spec
        self._client: Any = None

    def key(self, tenant: str, file_id: str) -> str:
        return f"{self.spec.prefix.strip('/')}/{tenant}/{file_id}"

    def _connect(self) -> Any:
        if self._client is None:
            import boto3  # the ``s3`` extra; imported only when a bucket is configured

            spec = self.spec
            self._client = boto3.client(
                "s3",
                endpoint_url=spec.endpoint_url,
                region_name=spec.region,
                aws_access_key_id=_env(spec.access_key_from_env),
                aws_secret_access_key=_env(spec.secret_key_from_env),
            )
        return self._client

    async def _run(self, what: str, work: Callable[[Any], T]) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        def call() -> T:
            return work(self._connect())

        try:
            return await asyncio.to_thread(call)
        except (BotoCoreError, ClientError, OSError) as exc:
            raise StoreUnavailable(f"s3 {what}: {exc!r}") from exc

    async def put(self, key: str, data: bytes) -> None:
        bucket = self.spec.bucket
        await self._run("put", lambda s3: s3.put_object(Bucket=bucket, Key=key, Body=data))

    async def get(self, key: str) -> bytes | None:
        bucket = self.spec.bucket

        def read(s3: Any) -> bytes | None:
            try:
                answer = s3.get_object(Bucket=bucket, Key=key)
            except s3.exceptions.NoSuchKey:
                return None
            body: bytes = answer["Body"].read()
            return body

        return await self._run("get", read)

    async def delete(self, key: str) -> None:
        bucket = self.spec.bucket
        await self._run("delete", lambda s3: s3.delete_object(Bucket=bucket, Key=key))


def _env(name: str | None) -> str | None:
    return os.environ.get(name) if name else None
