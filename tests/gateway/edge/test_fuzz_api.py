"""Fuzzing from ``GET /openapi.json`` with schemathesis, against a real uvicorn.

For each operation of the /v1 surface and the admin API, schemathesis generates requests
that fit the schema (positive) and requests that break it (negative); each is sent with
a valid key (a tenant key on /v1, the admin key on /admin). Every answer must be below
500, conform to the schema (status code documented, content type, error bodies in
OpenAI's shape), and every error must be ``{"error": {message, type, param, code}}``
(Anthropic's ``{"type": "error", "error": {type, message}}`` on ``/v1/messages*``).
The protocol fake engine answers, so the run is bounded (about 60-90 s on 2 shared cores).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import orjson
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.wire.errors import AnthropicError, ErrorResponse
from tests.gateway.ledger_seed import ADMIN_KEY, admin_config
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway

EXAMPLES = 25  # per operation and generation mode
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def fuzzed(path: str) -> bool:
    return path.startswith(("/v1/", "/admin/api/"))


def _check_error_shape(response: Any, path: str) -> None:
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        shape = AnthropicError if path.startswith("/v1/messages") else ErrorResponse
        shape.model_validate(orjson.loads(response.content))


def _fuzz(
    operation: Any,
    mode: GenerationMode,
    base_url: str,
    headers: dict[str, str],
    counts: Counter[str],
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        counts[f"{case.method} {case.path} {mode.value}"] += 1
        counts[f"status {response.status_code}"] += 1
        _check_error_shape(response, operation.path)
        case.validate_response(response, checks=CHECKS, headers=headers)

    try:
        run()
    except Unsatisfiable:
        # An operation with nothing to break (no parameters, no body) has no negative cases.
        assert mode is GenerationMode.NEGATIVE, operation.path
        counts[f"no negative cases: {operation.method.upper()} {operation.path}"] += 0


def test_fuzz_every_operation_from_the_openapi_schema() -> None:
    config = admin_config(fake_config(tokens=4))
    counts: Counter[str] = Counter()
    with running_gateway(config) as gateway:
        raw = httpx.get(gateway.base_url + "/openapi.json").json()
        schema = schemathesis.openapi.from_dict(raw)
        operations = [r.ok() for r in schema.get_all_operations()]
        operations = [op for op in operations if fuzzed(op.path)]
        assert len(operations) >= 22  # /v1, budgets, cache, keys, tenants, audit, load...
        for operation in operations:
            key = ADMIN_KEY if operation.path.startswith("/admin/") else TEST_KEY
            headers = {"authorization": f"Bearer {key}"}
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _fuzz(operation, mode, gateway.base_url, headers, counts)
    cases = sum(n for name, n in counts.items() if not name.startswith("status"))
    statuses = sorted((k, v) for k, v in counts.items() if k.startswith("status"))
    without = sorted(k for k in counts if k.startswith("no negative"))
    print(f"fuzzed {cases} cases over {len(operations)} operations: {statuses}; {without}")
    assert cases >= len(operations) * 10
    assert counts["status 200"] > 0 and any(k.startswith("status 4") for k in counts)
