"""An endpoint family as the app mounts it: its endpoints, the JSON bodies they parse,
and the error shape its paths answer in.

Each family package (``gateway.chat``, ``gateway.messages``, ``gateway.admin``…) declares
one ``FAMILY`` next to its endpoints; the app mounts the families it is given
(``gateway.app``), ``/openapi.json`` lists their bodies (``gateway.edge.openapi``) and the
error boundary answers errors under a family's ``prefix`` in its shape
(``gateway.edge.error_boundary``). A new endpoint family is a new package and one entry
in the app's list.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter
from pydantic import BaseModel

from gateway.wire.errors import ErrorShape


@dataclass(frozen=True, slots=True)
class Family:
    endpoints: tuple[APIRouter, ...]
    bodies: tuple[type[BaseModel], ...] = ()  # what its routes parse (``request_body``)
    prefix: str | None = None  # the paths whose errors answer in ``errors``
    errors: ErrorShape | None = None  # None: OpenAI's shape
