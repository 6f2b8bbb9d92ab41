"""Load a YAML config into ``GatewayConfig``; every problem names the file, line and field."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from policies.schema import GatewayConfig

_ENV_REF = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field or '<root>'}: {self.message}"


class ConfigError(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def _expand_env(text: str) -> str:
    """``${VAR}`` and ``${VAR:-default}`` in the file, so secrets and URLs stay out of it."""

    def substitute(match: re.Match[str]) -> str:
        return os.environ.get(match.group(1), match.group(2) or "")

    return _ENV_REF.sub(substitute, text)


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """Walk the composed YAML tree along a pydantic error location to find its line."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            key = next((k for k, _ in node.value if k.value == part), None)
            if match is None:
                return line
            node, line = match, (key or match).start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def parse_config(text: str, file: str = "<string>") -> GatewayConfig:
    text = _expand_env(text)
    try:
        node = yaml.compose(text)
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError([Problem(file, line, "", f"invalid YAML: {exc}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError([Problem(file, 1, "", "the file must hold a mapping")])
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = tuple(p for p in error["loc"] if not str(p).startswith("function-after"))
            problems.append(_problem(file, node, loc, error["msg"]))
        raise ConfigError(problems) from exc
    conflicts = key_conflicts(config)
    if conflicts:
        raise ConfigError([_problem(file, node, loc, message) for loc, message in conflicts])
    return config


def _problem(file: str, node: yaml.Node | None, loc: tuple[int | str, ...], msg: str) -> Problem:
    return Problem(file, _line_of(node, loc), ".".join(str(p) for p in loc), msg)


def load_config(path: str | Path) -> GatewayConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(path), None, "", f"cannot read: {exc.strerror}")]) from exc
    return parse_config(text, str(path))


Location = tuple[str | int, ...]


def key_conflicts(config: GatewayConfig) -> list[tuple[Location, str]]:
    """Keys that cannot be told apart: a repeated id within a tenant (one budget scope for
    two keys), or one digest (or one ``from_env`` variable) given to two keys."""
    problems: list[tuple[Location, str]] = []
    owner: dict[str, str] = {}
    for tenant_name, tenant in config.tenants.items():
        ids: set[str] = set()
        for index, key in enumerate(tenant.keys):
            where: Location = ("tenants", tenant_name, "keys", index)
            if key.id in ids:
                problems.append(((*where, "id"), f"key id {key.id!r} appears twice in this tenant"))
            ids.add(key.id)
            source = f"sha256 {key.sha256}" if key.sha256 else f"from_env {key.from_env}"
            field = "sha256" if key.sha256 else "from_env"
            label = f"tenant {tenant_name!r} key {key.id!r}"
            if source in owner:
                problems.append(
                    ((*where, field), f"the same key as {owner[source]}: two keys share one digest")
                )
            else:
                owner[source] = label
    return problems
