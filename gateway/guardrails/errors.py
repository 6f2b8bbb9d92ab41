"""What the guard answers, in OpenAI's shape (each family's edge reshapes it).

- ``GuardrailBlocked``     400 guardrail_blocked: a ``block`` rule matched (the rule named)
- ``NoLocalTier``          400 guardrail_no_local_tier: ``local`` and no in-process tier
- ``GuardrailUnavailable`` 503 guardrail_unavailable: a detector failed (fail closed)

None of them carries the value that was found.
"""

from __future__ import annotations

from gateway.errors import InvalidRequest, ServiceUnavailable


class GuardrailBlocked(InvalidRequest):
    code = "guardrail_blocked"

    def __init__(self, detector: str, where: str = "", *, answer: bool = False) -> None:
        what = "the answer" if answer else "the request"
        super().__init__(
            f"guardrail: {what} contains a value the {detector!r} rule blocks "
            f"(guardrails.detectors.{detector}: block)",
            param=where or None,
        )
        self.detector = detector


class NoLocalTier(InvalidRequest):
    code = "guardrail_no_local_tier"


class GuardrailUnavailable(ServiceUnavailable):
    code = "guardrail_unavailable"
