"""``POST /v1/route``: the routing decision for a request, without calling a model.

The body is a chat request (``messages``) or a text completion request (``prompt``);
``model`` defaults to ``auto``. The answer shows the complexity score, the text
features, the per-tier predicted quality (and which model gave it: the base, or the
feedback loop's serving refit and its version), the objective's λ and reason, the
request's session (``routing.sessions``: its turn, its tier, whether this turn moves it
and why; nothing is recorded), the chosen tier and every rule that moved it.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from gateway.chat import protocol as chat_wire
from gateway.completions import protocol as completions_wire
from gateway.core.entrance import ask_for, tier_only
from gateway.edge.deps import TenantDep
from gateway.edge.family import Family
from gateway.edge.http import GatewayEndpoint, read_body
from gateway.edge.openapi import errors, request_body
from gateway.edge.respond import core_headers
from gateway.errors import InvalidRequest
from gateway.types import RoutedRequest
from gateway.wire.common import load_json, parse_body
from policies.schema import GatewayConfig
from routers.objective import TierChoice

endpoints = APIRouter(
    route_class=GatewayEndpoint,
    tags=["v1"],
    responses=errors(400, 401, 404, 408, 413, 429, 500, 503),
)


@endpoints.post(
    "/v1/route",
    openapi_extra=request_body(chat_wire.ChatCompletionRequest, completions_wire.CompletionRequest),
)
async def explain_route(request: Request, call: TenantDep) -> Response:
    core = call.core  # one snapshot: a reload during the awaits below changes nothing here
    config = core.config
    server = config.server
    raw = await read_body(request, server.max_body_bytes, server.header_timeout_s)
    data = load_json(raw)
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    data.setdefault("model", "auto")
    body = orjson.dumps(data)
    parsed: chat_wire.ChatCompletionRequest | completions_wire.CompletionRequest
    if "messages" in data:
        parsed = parse_body(chat_wire.ChatCompletionRequest, body)
        build = chat_wire.to_generation(parsed)
    elif "prompt" in data:
        parsed = parse_body(completions_wire.CompletionRequest, body)
        build = completions_wire.to_generation(parsed)
    else:
        raise InvalidRequest("give 'messages' (chat) or 'prompt' (completions)", param="messages")
    turn = tier_only(data["model"], build, parsed.session())
    ask = ask_for(call.principal, turn, core_headers(request.headers))
    # An explanation is not traffic: no cache lookup, and it stays out of target_share.
    routed = await core.route(ask)
    tier = config.tiers[routed.tier]
    complexity = routed.complexity
    answer = {
        "object": "tiergate.route",
        "requested_model": routed.ask.requested_model,
        "tier": routed.tier,
        "model": routed.decision.pinned_model or config.engines[tier.engines[0]].model,
        "score": None if complexity is None else complexity.score,
        "p_large": None if complexity is None else complexity.p_large,
        "thresholds": list(routed.decision.thresholds or config.routing.thresholds),
        "features": None if complexity is None else dict(complexity.features),
        "quality": _per_tier(config, None if complexity is None else complexity.quality),
        "quality_model": _quality_model(routed),
        "objective": _objective(routed.decision.choice, config),
        "session": None if routed.session is None else routed.session.describe(),
        "escalation": _escalation(routed),
        "trail": list(routed.decision.trail),
    }
    headers = {"x-tiergate-tier": routed.tier}
    if complexity is not None:
        headers["x-tiergate-complexity"] = f"{complexity.score:.4f}"
    return Response(orjson.dumps(answer), media_type="application/json", headers=headers)


def _escalation(routed: RoutedRequest) -> dict[str, object] | None:
    """The cheap-first plan (routing.escalation): which tier answers first, which is asked
    when its answer is weak, and by what rule; None when the router's tier answers alone
    (the trail says why)."""
    plan = routed.escalation
    if plan is None:
        return None
    spec = plan.spec
    return {
        "first": plan.cheap,
        "then": plan.then,
        "reason": plan.reason,
        "signal": spec.signal,
        "quantile": spec.quantile if spec.signal == "quantile" else None,
        "threshold": spec.threshold,
    }


def _per_tier(config: GatewayConfig, values: tuple[float, ...] | None) -> dict[str, float] | None:
    """P(the tier's answer is acceptable), by tier."""
    if values is None:
        return None
    return {t: round(v, 4) for t, v in zip(config.tiers, values, strict=True)}


def _quality_model(routed: RoutedRequest) -> dict[str, object] | None:
    """Which model gave the per-tier predictions: the feedback loop's serving refit (with
    its version), or the base model."""
    if routed.complexity is None or routed.complexity.quality is None:
        return None
    if routed.quality_model is None:
        return {"model": "base", "version": None}
    return routed.quality_model.describe()


def _objective(choice: TierChoice | None, config: GatewayConfig) -> dict[str, object] | None:
    """``routing.objective``'s decision: expected cost per tier, λ, the tier and why."""
    objective = config.routing.objective
    if choice is None or objective is None:
        return None
    return {
        objective.kind: objective.share,
        "lambda": choice.lam,
        "expected_cost_usd": dict(zip(choice.tiers, choice.cost, strict=True)),
        "tier": choice.tier,
        "among": list(choice.allowed),
        "reason": choice.reason,
    }


FAMILY = Family(
    (endpoints,), bodies=(chat_wire.ChatCompletionRequest, completions_wire.CompletionRequest)
)
