"""The ``batches:`` section: the batch runner, what a tenant may hold, where files live.

Files and batches (``/v1/files``, ``/v1/batches``, ``/v1/messages/batches``) live in the
shared store (Redis, or this process without ``redis_url``); a file larger than
``store_max_bytes`` goes to the S3-compatible bucket ``s3`` names, and without one it is
refused. Every replica runs up to ``concurrency`` batch lines at once, taken from one
shared queue; a line a replica took and stopped beating for ``claim_idle_s`` (it died) is
claimed by another. docs/batches.md describes every field.
"""

from __future__ import annotations

from pydantic import Field

from policies.frozen import Frozen

MIB = 1024 * 1024
DAY_S = 86_400


class BatchLimits(Frozen):
    """What one tenant may hold at once (OpenAI's own limits by default, files aside)."""

    open_batches: int = Field(100, ge=1)  # batches not yet ended
    lines: int = Field(500_000, ge=1)  # lines of the batches not yet ended
    lines_per_batch: int = Field(50_000, ge=1)  # OpenAI: 50,000 requests per batch
    file_bytes: int = Field(2 * 1024 * MIB, ge=1)  # every file the tenant keeps, together


class S3Config(Frozen):
    """An S3-compatible bucket for files over ``store_max_bytes`` (AWS S3, MinIO, Ceph…).
    Credentials come from the environment variables named here, else boto3's chain."""

    bucket: str = Field(min_length=3, max_length=63)
    endpoint_url: str | None = None  # None: AWS's own
    region: str = "us-east-1"
    prefix: str = "tiergate/files"
    access_key_from_env: str | None = None
    secret_key_from_env: str | None = None


class BatchesConfig(Frozen):
    enabled: bool = True  # false: this replica serves the API but runs no lines
    concurrency: int = Field(16, ge=1, le=4096)  # lines this replica runs at once
    # A replica beats for the lines it holds every third of this; a line nobody beat for
    # this long (its replica died) is taken over by another replica.
    claim_idle_s: float = Field(30.0, ge=1.0)
    poll_s: float = Field(1.0, gt=0, le=60)  # an idle runner's wait for new lines
    sweep_s: float = Field(5.0, gt=0)  # finishing, expiring and cleaning up, this often
    # At shutdown, running lines get this long to finish before they are cut short (and
    # run again by another replica, under the same request id: charged once).
    drain_s: float = Field(10.0, ge=0)
    # Tries of a line that met an unreachable store or engine, then it ends as an error
    # line; an overloaded pool or a rate limit is waited out until the batch expires.
    max_attempts: int = Field(8, ge=1)
    retry_s: float = Field(1.0, gt=0)  # the first retry's wait; doubled each time, to 30 s
    # Files up to this size live in the shared store; larger ones need ``s3``.
    store_max_bytes: int = Field(64 * MIB, ge=1024, le=512 * MIB)
    max_file_bytes: int = Field(200 * MIB, ge=1024)  # OpenAI's batch input limit
    max_line_bytes: int = Field(4 * MIB, ge=1024)  # one request line
    file_ttl_s: float = Field(30 * DAY_S, ge=60)  # an input file's default (OpenAI: 30 days)
    result_ttl_s: float = Field(30 * DAY_S, ge=60)  # output and error files, ended batches
    completion_window_s: float = Field(DAY_S, ge=60)  # ``24h``: then the batch expires
    limits: BatchLimits = BatchLimits()
    tenants: dict[str, BatchLimits] = Field(default_factory=dict)  # per-tenant overrides
    s3: S3Config | None = None

    @property
    def file_limit(self) -> int:
        """The largest file taken: without a bucket, what the shared store keeps."""
        if self.s3 is None:
            return min(self.max_file_bytes, self.store_max_bytes)
        return self.max_file_bytes

    def limits_for(self, tenant: str) -> BatchLimits:
        return self.tenants.get(tenant, self.limits)
