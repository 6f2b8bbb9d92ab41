"""The operations family: ``/healthz``, ``/readyz``, ``/metrics`` and ``/v1/load``."""

from __future__ import annotations

from gateway.edge.family import Family
from gateway.ops import health, load, metrics

FAMILY = Family((health.endpoints, metrics.endpoints, load.endpoints))
