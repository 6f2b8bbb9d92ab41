"""``GET /openapi.json``: OpenAPI 3.1 for the /v1 surface and the admin API, generated
from the wire models, with the error body every route answers with."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.admin.protocol import TenantCreate, TenantUpdate
from gateway.app import FAMILIES
from gateway.chat.protocol import ChatCompletionRequest
from gateway.errors import ApiError, InvalidRequest
from gateway.wire.errors import AnthropicError, ErrorResponse, anthropic_body
from policies.schema import TenantSpec
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import running_gateway


def _resolve(schema: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/components/schemas/")
    found: dict[str, Any] = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


def test_openapi_describes_the_v1_surface_from_the_wire_models() -> None:
    with running_gateway(fake_config()) as gateway:
        response = httpx.get(gateway.base_url + "/openapi.json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.1")
    paths = schema["paths"]
    for path, method in (
        ("/v1/chat/completions", "post"),
        ("/v1/completions", "post"),
        ("/v1/responses", "post"),
        ("/v1/responses/{response_id}", "get"),
        ("/v1/responses/{response_id}", "delete"),
        ("/v1/responses/{response_id}/input_items", "get"),
        ("/v1/models", "get"),
        ("/v1/route", "post"),
        ("/admin/api/budgets", "put"),
        ("/admin/api/budgets/spend", "get"),
        ("/admin/api/overview", "get"),
        ("/admin/api/cache/{tenant}", "delete"),
        ("/admin/api/policies/reload", "post"),
        ("/v1/load", "get"),
        ("/admin/api/keys", "post"),
        ("/admin/api/keys", "get"),
        ("/admin/api/keys/{key_id}", "patch"),
        ("/admin/api/keys/{key_id}", "delete"),
        ("/admin/api/tenants", "post"),
        ("/admin/api/tenants/{name}", "patch"),
        ("/admin/api/tenants/{name}", "delete"),
        ("/admin/api/audit", "get"),
        ("/v1/files", "post"),
        ("/v1/files/{file_id}/content", "get"),
        ("/v1/batches", "post"),
        ("/v1/batches/{batch_id}/cancel", "post"),
        ("/v1/messages/batches", "post"),
        ("/v1/messages/batches/{message_batch_id}/results", "get"),
        ("/admin/api/batches", "get"),
    ):
        assert method in paths[path], path
    assert not [p for p in paths if p in ("/admin", "/admin/login", "/admin/static/{name}")]
    # Every reference resolves (no hand-written fragments pointing nowhere).
    for ref in _refs(schema):
        _resolve(schema, ref)
    chat = paths["/v1/chat/completions"]["post"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    component = _resolve(schema, body["$ref"])
    # The component is the wire model's own schema: same fields, same constraints.
    assert set(component["properties"]) == set(ChatCompletionRequest.model_fields)
    assert component["required"] == ChatCompletionRequest.model_json_schema()["required"]
    assert component["properties"]["messages"]["minItems"] == 1
    route_body = paths["/v1/route"]["post"]["requestBody"]["content"]["application/json"]
    assert len(route_body["schema"]["anyOf"]) == 2
    for model in (body for family in FAMILIES for body in family.bodies):
        assert model.__name__ in schema["components"]["schemas"]
    # Errors: the OpenAI shape on every /v1 operation, Anthropic's on /v1/messages*;
    # FastAPI's 422 is not there.
    for path, item in paths.items():
        for operation in item.values():
            assert "422" not in operation["responses"], path
            if path.startswith("/v1/"):
                error = operation["responses"]["401"]["content"]["application/json"]["schema"]
                shape = "/AnthropicError" if path.startswith("/v1/messages") else "/ErrorResponse"
                assert error["$ref"].endswith(shape), path
    security = schema["components"]["securitySchemes"]
    assert {"tenantKey", "adminKey"} <= set(security)
    assert chat["security"] == [{"tenantKey": []}]
    assert paths["/v1/load"]["get"]["security"] == [{"tenantKey": []}]
    create_key = paths["/admin/api/keys"]["post"]
    assert create_key["security"] == [{"adminKey": []}] and "201" in create_key["responses"]
    key_body = create_key["requestBody"]["content"]["application/json"]["schema"]
    assert _resolve(schema, key_body["$ref"])["required"] == ["tenant"]
    tenant_body = paths["/admin/api/tenants"]["post"]["requestBody"]["content"]
    tenant = _resolve(schema, tenant_body["application/json"]["schema"]["$ref"])
    assert "keys" not in tenant["properties"] and tenant["additionalProperties"] is False
    audit = paths["/admin/api/audit"]["get"]
    assert {p["name"] for p in audit["parameters"]} == {"format", "limit"}
    assert "text/csv" in audit["responses"]["200"]["content"]


def test_the_tenant_body_is_the_tenant_spec_without_keys() -> None:
    """The wire model mirrors ``TenantSpec``: same fields (but ``keys``), same defaults."""
    spec = {n: f.get_default() for n, f in TenantSpec.model_fields.items() if n != "keys"}
    wire = {n: f.get_default() for n, f in TenantUpdate.model_fields.items()}
    assert wire == spec
    assert set(TenantCreate.model_fields) == {"name", *spec}


def test_the_error_model_matches_what_errors_write() -> None:
    for error in (InvalidRequest("bad", param="messages", code="invalid_value"), ApiError("x")):
        assert ErrorResponse.model_validate(error.body()).model_dump() == error.body()
        anthropic = anthropic_body(error, "req-1")
        assert AnthropicError.model_validate(anthropic).model_dump() == anthropic
