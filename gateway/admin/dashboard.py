"""``/admin/api/*``: the dashboard's JSON, also for scripts with the Bearer admin key.

Every endpoint takes ``start`` and ``end`` (ISO dates, UTC, inclusive; default the
last 7 days). ``overview`` reads the per-day aggregates, which cover every request
(latency percentiles included); ``denials`` the newest ``EVENT_SAMPLE`` events of the
range, because reading events back is slow (about 0.4 ms each with redis-py's Python
parser, 0.06 ms with hiredis).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import orjson
from starlette.responses import Response

from gateway.admin import report
from gateway.admin.deps import AdminDep
from gateway.admin.limits import budget_limits
from gateway.errors import InvalidRequest
from gateway.state import GatewayState
from policies.stores.ledger import SpendEvent, days_between

MAX_DAYS = 366
DEFAULT_DAYS = 7
EVENT_SAMPLE = 500
DENIALS_SHOWN = 50
TOOL_CALLS_SHOWN = 100


def today() -> date:
    return datetime.now(UTC).date()


def _parse_day(raw: str | None, name: str, default: date) -> date:
    if raw is None or raw == "":
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(f"{name} must be a date like 2026-01-31", param=name) from None


def date_range(start_text: str | None, end_text: str | None) -> tuple[date, date]:
    end = _parse_day(end_text, "end", today())
    start = _parse_day(start_text, "start", end - timedelta(days=DEFAULT_DAYS - 1))
    if start > end:
        raise InvalidRequest("start must not be after end", param="start")
    if (end - start).days + 1 > MAX_DAYS:
        raise InvalidRequest(f"the range may span at most {MAX_DAYS} days", param="start")
    return start, end


def _json(body: dict[str, Any]) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers={"cache-control": "no-store"}
    )


async def _events(state: GatewayState, start: date, end: date) -> list[SpendEvent]:
    start_ts = datetime.combine(start, time.min, UTC).timestamp()
    end_ts = datetime.combine(end + timedelta(days=1), time.min, UTC).timestamp() - 1e-6
    return await state.parts.money.ledger.events(start_ts, end_ts, EVENT_SAMPLE)


async def overview(state: AdminDep, start: str | None = None, end: str | None = None) -> Response:
    first, last = date_range(start, end)
    return await _overview(state, first, last)


async def _overview(state: GatewayState, start: date, end: date) -> Response:
    tenants, tiers = state.keys.tenant_names(), list(state.config.tiers)
    now = today()
    aggregates = await state.parts.money.ledger.daily(tenants, start, end)
    today_aggs = await state.parts.money.ledger.daily(tenants, now, now)
    month_aggs = await state.parts.money.ledger.daily(tenants, now.replace(day=1), now)

    share = None
    if state.parts.router.shares is not None:
        if state.config.routing.target_share is not None:
            await state.parts.router.shares.sync(
                state.config.routing, tiers
            )  # this replica's latest too
        share = state.parts.router.shares.report(state.config.routing, tiers)
    objective = None
    if state.parts.router.objective is not None and state.config.routing.objective is not None:
        await state.parts.router.objective.sync(state.config.routing)  # this replica's latest too
        objective = state.parts.router.objective.report(state.config.routing)

    def build() -> dict[str, Any]:
        body = report.overview(aggregates, days_between(start, end), tenants, tiers)
        body["tier_share"] = share  # target vs actual share per tier (routing.target_share)
        body["objective"] = objective  # λ, expected quality given up (routing.objective)
        body["latency"] = report.latency(aggregates, tiers)
        body["tool_calls"] = report.tool_calls(aggregates)  # MCP (/mcp)
        limits = budget_limits(state.config)
        body["budgets"] = report.budget_rows(tenants, limits, today_aggs, month_aggs)
        body["range"] = {"start": start.isoformat(), "end": end.isoformat()}
        return body

    return _json(await asyncio.to_thread(build))


async def denials(state: AdminDep, start: str | None = None, end: str | None = None) -> Response:
    """The newest refused requests (budget, rate limit) among the newest events of the range."""
    return await _denials(state, *date_range(start, end))


async def _denials(state: GatewayState, start: date, end: date) -> Response:
    events = await _events(state, start, end)
    rows = await asyncio.to_thread(report.denials, events, DENIALS_SHOWN)
    return _json(
        {
            "range": {"start": start.isoformat(), "end": end.isoformat()},
            "sampled_events": len(events),
            "denials": rows,
        }
    )


async def tool_calls(state: AdminDep, start: str | None = None, end: str | None = None) -> Response:
    """The newest MCP tool calls among the newest events of the range."""
    return await _tool_calls(state, *date_range(start, end))


async def _tool_calls(state: GatewayState, start: date, end: date) -> Response:
    events = await _events(state, start, end)
    rows = await asyncio.to_thread(report.recent_tool_calls, events, TOOL_CALLS_SHOWN)
    return _json(
        {
            "range": {"start": start.isoformat(), "end": end.isoformat()},
            "sampled_events": len(events),
            "tool_calls": rows,
        }
    )
