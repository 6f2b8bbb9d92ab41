"""A batch's end: once every line has its result, its output and error files (OpenAI's),
then its last status (``completed``, ``expired`` when some lines ran out of time,
``cancelled`` after a cancel).

Any replica may finish a batch, and two may try at once (the one whose line was the
last, and another's sweep): moving ``in_progress`` to ``finalizing`` is a compare-and-
set, the files have ids derived from the batch (writing one twice keeps the first), and
only the replica whose final move succeeded drops the lines. A replica that died while
finalizing leaves a ``finalizing`` batch that a sweep finishes after ``claim_idle_s``.
"""

from __future__ import annotations

import hashlib
import logging

from gateway.batches.files import Files
from policies.batches_spec import BatchesConfig
from policies.stores.batch_records import (
    CANCELLED,
    CANCELLING,
    COMPLETED,
    EXPIRED,
    FINALIZING,
    IN_PROGRESS,
    BatchRecord,
    BatchStore,
    LineResult,
)

log = logging.getLogger(__name__)


def output_id(record: BatchRecord, kind: str) -> str:
    digest = hashlib.sha256(f"{record.tenant}/{record.id}/{kind}".encode()).hexdigest()
    return f"file-{digest[:24]}"


def split(results: dict[int, bytes]) -> tuple[bytes, bytes]:
    """OpenAI's output file (answered lines) and error file (the rest), in line order."""
    output: list[bytes] = []
    errors: list[bytes] = []
    for index in sorted(results):
        kind, line = LineResult.decode(results[index])
        (output if kind == "o" else errors).append(line + b"\n")
    return b"".join(output), b"".join(errors)


async def _files(files: Files, spec: BatchesConfig, record: BatchRecord) -> dict[str, str]:
    results = await files.store.results(record.tenant, record.id)
    output, errors = split(results)
    ttl = record.output_ttl_s or spec.result_ttl_s
    changes = {}
    for kind, content in (("output", output), ("error", errors)):
        if content:
            name = f"{record.id}_{kind}.jsonl"
            kept = await files.keep(
                record.tenant, name, "batch_output", content, ttl, output_id(record, kind)
            )
            changes[f"{kind}_file_id"] = kept.id
    return changes


async def finalize(
    files: Files, spec: BatchesConfig, record: BatchRecord, now: int
) -> BatchRecord | None:
    """Finish ``record``, whose every line has a result (or leave it to the replica that
    is already at it); the record afterwards."""
    store: BatchStore = files.store
    tenant, batch_id = record.tenant, record.id
    if record.status == IN_PROGRESS:
        moved_to, moved = await store.move(tenant, batch_id, [IN_PROGRESS], FINALIZING, now)
        if not moved or moved_to is None:
            return moved_to
        record = moved_to
    elif record.status not in (FINALIZING, CANCELLING):
        return record
    changes = await _files(files, spec, record) if record.api == "openai" else {}
    final = CANCELLED if record.status == CANCELLING else EXPIRED if record.expired else COMPLETED
    keep_s = record.output_ttl_s or spec.result_ttl_s
    ended, moved = await store.move(
        tenant, batch_id, [FINALIZING, CANCELLING], final, now, changes, keep_s
    )
    if moved and record.api == "openai":
        await store.drop_lines(tenant, batch_id)  # the files hold them now
    if moved:
        log.info("batch %s/%s %s", tenant, batch_id, final)
    return ended
