"""How upstream names become the gateway's, and who may use which.

A tool or prompt ``add`` of server ``calc`` is ``calc.add`` (MCP tool names may hold
``A-Z a-z 0-9 _ - .``, 1 to 128 of them; a server name holds no ``.``, so the first ``.``
splits the two). A resource URI ``greeting://bob`` of server ``calc`` is
``calc+greeting://bob``: a valid URI (its scheme is ``calc+greeting``) that names the
server first; a server name holds no ``+``.

An allowlist is the tenant's ``mcp_tools`` and, narrowing it, the API key's: ``SERVER.NAME``
patterns with ``*`` wildcards (shell-style, case-sensitive). A name is allowed when both
lists allow it; resources belong to a server as a whole, so they are allowed when the
lists allow ``SERVER.*`` (the whole server: ``calc.*``, ``c*``, ``*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

SEPARATOR = "."
URI_SEPARATOR = "+"


def tool_name(server: str, name: str) -> str:
    return f"{server}{SEPARATOR}{name}"


def split_name(full: str) -> tuple[str, str] | None:
    """``(server, name)`` of a gateway name, or None when it names no server."""
    server, sep, name = full.partition(SEPARATOR)
    return (server, name) if sep and server and name else None


def resource_uri(server: str, uri: str) -> str:
    return f"{server}{URI_SEPARATOR}{uri}"


def split_uri(full: str) -> tuple[str, str] | None:
    server, sep, uri = full.partition(URI_SEPARATOR)
    return (server, uri) if sep and server and uri else None


def _matches(patterns: Sequence[str], name: str) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class Allowlist:
    tenant: tuple[str, ...]
    key: tuple[str, ...] | None = None  # None: the tenant's list alone

    def allows(self, full_name: str) -> bool:
        if not _matches(self.tenant, full_name):
            return False
        return self.key is None or _matches(self.key, full_name)

    def allows_server(self, server: str) -> bool:
        """The whole server (its resources): ``SERVER.*`` read as a name."""
        return self.allows(tool_name(server, "*"))

    def may_reach(self, server: str) -> bool:
        """Whether some name of ``server`` could be allowed: which upstreams to list. A
        name ``server.X`` starts with a pattern's literal part before its first ``*``
        (the whole pattern, without one); ``allows`` then decides name by name."""
        head = server + SEPARATOR

        def reaches(pattern: str) -> bool:
            literal, star, _ = pattern.partition("*")
            if not star:
                return pattern.startswith(head)
            return head.startswith(literal) or literal.startswith(head)

        def any_reaches(patterns: Sequence[str]) -> bool:
            return any(reaches(p) for p in patterns)

        return any_reaches(self.tenant) and (self.key is None or any_reaches(self.key))
