"""An endpoint family as the app mounts it: its endpoints, the JSON bodies they parse,
the wire format each of its generation paths serves, and the error shape its paths
answer in.

Each family package (``gateway.chat``, ``gateway.messages``, ``gateway.admin``…) declares
one ``FAMILY`` next to its endpoints; the app mounts the families it is given
(``gateway.app``), ``/openapi.json`` lists their bodies (``gateway.edge.openapi``) and the
error boundary answers errors under a family's ``prefix`` in its shape
(``gateway.edge.error_boundary``), and a batch line runs through the format its
family declares for the line's path (``formats_by_path``; ``gateway.batches.lines``).
A new endpoint family is a new package and one entry
in the app's list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from gateway.wire.errors import ErrorShape
from gateway.wire.format import WireFormat


@dataclass(frozen=True, slots=True)
class Family:
    endpoints: tuple[APIRouter, ...]
    bodies: tuple[type[BaseModel], ...] = ()  # what its routes parse (``request_body``)
    prefix: str | None = None  # the paths whose errors answer in ``errors``
    errors: ErrorShape | None = None  # None: OpenAI's shape
    formats: Mapping[str, WireFormat[Any]] = field(default_factory=dict)  # path -> format


def formats_by_path(families: Iterable[Family]) -> dict[str, WireFormat[Any]]:
    """Every generation path the families serve, with its wire format (one family each)."""
    found: dict[str, WireFormat[Any]] = {}
    for family in families:
        for path, wire in family.formats.items():
            if path in found:
                raise ValueError(f"two families declare {path}")
            found[path] = wire
    return found
