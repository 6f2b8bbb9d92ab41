"""Operations endpoints: ``/healthz``, ``/readyz``, ``/metrics``, ``/v1/load``."""
