"""The ``mcp:`` section: the upstream MCP servers ``/mcp`` aggregates, and how calls run.

Each server is reached over streamable HTTP or SSE (``url``) or runs as a child process
the gateway supervises over stdio (``command``, an argv list). Its tools, prompts and
resources are offered under its name (``SERVER.TOOL``: ``gateway/mcp/names.py``).
Credentials are never in the file: ``from_env`` names the variable the gateway reads when
it connects, and a server may have its own, one per tenant and one per API key (the
most specific wins; a connection is opened per credential, so one tenant's credential
never carries another's call).

Who may call what is the tenant's ``mcp_tools`` (and an API-managed key's, which can only
narrow it): ``SERVER.TOOL`` patterns with ``*`` wildcards, none by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from policies.frozen import Frozen

# A server name prefixes its tools (``calc.add``) and, as ``calc+``, its resource URIs
# (a URI scheme starts with a letter and may not hold ``.``; ``+`` never appears in one).
SERVER_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
ServerName = Annotated[str, StringConstraints(pattern=SERVER_PATTERN)]
# An allowlist entry: ``SERVER.TOOL`` in the characters MCP tool names may use, ``*`` a
# wildcard (``calc.*``, ``*.search``, ``*``).
TOOL_PATTERN = r"^[A-Za-z0-9_.*-]{1,200}$"
ToolPattern = Annotated[str, StringConstraints(pattern=TOOL_PATTERN)]
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME)]
# ``TENANT/KEY_ID`` (both follow the tenant and key name rules: no ``/`` in either).
KEY_REF = r"^[A-Za-z0-9_.-]{1,64}/[A-Za-z0-9_.-]{1,64}$"
KeyRef = Annotated[str, StringConstraints(pattern=KEY_REF)]


class McpCallLimit(Frozen):
    """Tool calls per sliding minute (its own windows: model calls do not count here)."""

    calls_per_minute: int = Field(ge=1)


class UpstreamCredential(Frozen):
    """A secret from the environment, given to the upstream as an HTTP header (``url``
    servers: ``header: prefix+secret``) or as a variable of its process (``command``
    servers: ``env``)."""

    from_env: EnvName
    header: str = Field("Authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")
    prefix: str = Field("Bearer ", max_length=64)
    env: EnvName | None = None  # command servers: the variable the process reads it from


class McpServerSpec(Frozen):
    url: str | None = Field(None, pattern=r"^https?://")
    transport: Literal["streamable_http", "sse"] = "streamable_http"  # for ``url``
    command: tuple[str, ...] | None = Field(None, min_length=1)
    env: dict[EnvName, str] = Field(default_factory=dict)  # plain settings for ``command``
    cwd: str | None = None
    credential: UpstreamCredential | None = None  # the server's own
    tenant_credentials: dict[str, UpstreamCredential] = Field(default_factory=dict)
    key_credentials: dict[KeyRef, UpstreamCredential] = Field(default_factory=dict)
    price_usd: float = Field(0.0, ge=0, le=1000)  # charged per call, to the caller's budgets
    tool_prices: dict[str, float] = Field(default_factory=dict)  # per tool, over price_usd
    timeout_s: float | None = Field(None, gt=0, le=3600)  # None: ``mcp.timeout_s``

    @model_validator(mode="after")
    def _one_way_in(self) -> McpServerSpec:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url or command")
        credentials = [
            c for c in (self.credential, *self.tenant_credentials.values()) if c is not None
        ] + list(self.key_credentials.values())
        if self.command is not None and any(c.env is None for c in credentials):
            raise ValueError("a command server's credentials need env: the variable to set")
        if any(p < 0 for p in self.tool_prices.values()):
            raise ValueError("tool_prices must not be negative")
        return self

    def price_of(self, tool: str) -> float:
        return self.tool_prices.get(tool, self.price_usd)

    def credential_for(self, tenant: str, key_id: str) -> tuple[str, UpstreamCredential | None]:
        """The most specific credential for a caller, and the name of its connection
        (``key:T/K``, ``tenant:T`` or ``server``): one connection per credential."""
        key = f"{tenant}/{key_id}"
        if key in self.key_credentials:
            return f"key:{key}", self.key_credentials[key]
        if tenant in self.tenant_credentials:
            return f"tenant:{tenant}", self.tenant_credentials[tenant]
        return "server", self.credential


class McpSessions(Frozen):
    """How ``/mcp`` keeps MCP sessions. Stateless (the default): every POST is served on
    its own, without an ``Mcp-Session-Id``, so any replica answers any request and there
    is nothing to share between replicas (the 2026-07-28 protocol is stateless anyway).
    Stateful: the SDK's sessions live in this process, bound to the API key that opened
    them, at most ``max_sessions``, closed after ``idle_s`` without a request; behind a
    load balancer that needs sticky routing on ``Mcp-Session-Id``."""

    stateless: bool = True
    max_sessions: int = Field(1000, ge=1)
    idle_s: float = Field(600.0, gt=0)
    max_request_bytes: int = Field(4 * 1024 * 1024, ge=1024)


class McpConfig(Frozen):
    servers: dict[ServerName, McpServerSpec] = Field(default_factory=dict)
    timeout_s: float = Field(30.0, gt=0, le=3600)  # one upstream call, end to end
    connect_timeout_s: float = Field(10.0, gt=0, le=600)  # start and initialize an upstream
    max_result_bytes: int = Field(8 * 1024 * 1024, ge=1024, le=1024**3)
    # Upstream listings (tools, prompts, resources) are reused this long.
    catalog_ttl_s: float = Field(60.0, ge=0, le=86_400)
    max_inflight: int = Field(256, ge=1)  # /mcp requests served at once, per replica
    sessions: McpSessions = McpSessions()  # fixed at start (a reload refuses a change)


def mcp_problems(
    mcp: McpConfig, keys: Mapping[str, Sequence[str]], allowlists: Mapping[str, Sequence[str]]
) -> list[str]:
    """What the models cannot check alone. ``keys``: each tenant of the file and its key
    ids; ``allowlists``: where an ``mcp_tools`` list is (``tenants.T.mcp_tools``) and its
    patterns. A pattern whose server part has no wildcard must name a server; a key
    credential for a tenant of the file must name one of its keys (or an API-managed
    one, ``key_...``). Credentials of tenants not in the file are for runtime tenants."""
    problems: list[str] = []
    for where, patterns in allowlists.items():
        for pattern in patterns:
            server = pattern.partition(".")[0]
            if "*" not in server and server not in mcp.servers:
                problems.append(f"{where}: {pattern!r} names no server in mcp.servers")
    for name, spec in mcp.servers.items():
        for ref in spec.key_credentials:
            tenant, _, key_id = ref.partition("/")
            known = keys.get(tenant)
            if known is not None and key_id not in known and not key_id.startswith("key_"):
                problems.append(f"mcp.servers.{name}.key_credentials: {ref!r} names no key")
    return problems


def mcp_notes(mcp: McpConfig, environ: Mapping[str, str]) -> list[str]:
    """What ``check-config`` says without failing: credentials whose variable is not
    set where it runs (the gateway reads them when it connects)."""
    notes: list[str] = []
    for name, spec in mcp.servers.items():
        named = [("credential", spec.credential)]
        named += [(f"tenant_credentials.{t}", c) for t, c in spec.tenant_credentials.items()]
        named += [(f"key_credentials.{k}", c) for k, c in spec.key_credentials.items()]
        for where, credential in named:
            if credential is not None and not environ.get(credential.from_env):
                notes.append(
                    f"mcp.servers.{name}.{where}: ${credential.from_env} is not set here "
                    "(the gateway reads it when it connects)"
                )
    return notes
