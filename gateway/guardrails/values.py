"""The guard for what does not run on the serving core: embeddings inputs, MCP tool
arguments and results, batch input files. The same policy and actions as ``screen``:
``redact`` gives placeholders, ``block`` a 400 naming the rule, a detector's failure a
503 (or, ``fail_open``, the value as it came); ``local`` keeps the value off a remote
destination (``remote=True``: refused with 400 guardrail_no_local_tier), and where the
value is kept rather than sent (a file), it is redacted like ``redact``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from gateway.errors import ApiError
from gateway.guardrails.errors import NoLocalTier
from gateway.guardrails.policy import policy_for
from gateway.guardrails.redactor import Redactor
from gateway.telemetry.metrics import GatewayMetrics
from policies.tenants import Principal

log = logging.getLogger(__name__)


def guard_value(
    principal: Principal,
    value: Any,
    where: str,
    *,
    remote: bool,
    kept: bool = False,
    metrics: GatewayMetrics | None = None,
    side: str = "request",
) -> Any:
    """``value`` (text, or JSON-like) as the caller's policy leaves it (unchanged without
    a ``guardrails:`` block). ``kept``: it is stored, not sent (``local`` redacts)."""
    policy = policy_for(principal)
    if policy is None:
        return value
    redactor = Redactor(policy, local_redacts=kept)
    started = time.perf_counter()
    try:
        return guarded(redactor, value, where, remote=remote)
    finally:
        if metrics is not None:
            metrics.guarded(principal.tenant, redactor.counts, side, time.perf_counter() - started)


def guarded(redactor: Redactor, value: Any, where: str, *, remote: bool) -> Any:
    """``value`` through ``redactor``, its failures mapped as ``screen`` maps them."""
    try:
        result = redactor.walk(value, where)
    except ApiError:
        raise
    except Exception as exc:  # any detector's failure is the guard's: fail closed or open
        redactor.detector_failed(exc, where, "it was not sent")
        return value
    if redactor.local and remote:
        raise NoLocalTier(
            f"guardrail: {where} holds a value that must stay local, and it would go to a "
            "remote service",
            param=where,
        )
    return result


def guard_jsonl(
    principal: Principal, content: bytes, metrics: GatewayMetrics | None = None
) -> bytes:
    """A batch input file as it is kept: each JSON line's texts redacted with one set of
    placeholders for the whole file (``local`` redacts too: the file is kept); a
    ``block`` value refuses the upload naming its line. A line that is not JSON is
    redacted as text (the batch refuses it later, as it would have)."""
    policy = policy_for(principal)
    if policy is None:
        return content
    try:
        text = content.decode()
    except UnicodeDecodeError:
        return content  # not UTF-8: no batch can use it, and the batch says so
    redactor = Redactor(policy, local_redacts=True)
    started = time.perf_counter()
    out: list[bytes] = []
    try:
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                out.append(line.encode())
                continue
            try:
                parsed: Any = orjson.loads(line)
            except orjson.JSONDecodeError:
                parsed = line
            kept = guarded(redactor, parsed, f"line {number}", remote=False)
            out.append(kept.encode() if isinstance(kept, str) else orjson.dumps(kept))
    finally:
        if metrics is not None:
            seconds = time.perf_counter() - started
            metrics.guarded(principal.tenant, redactor.counts, "file", seconds)
    return b"\n".join(out)
