"""A tenant's (or one key's) ``guardrails:`` block: what is looked for, and what is done.

    guardrails:
      detectors: {email: redact, card: block, ssn: local, secret: block, ip: log}
      restore: true        # placeholders in the answer become the caller's values again
      allow: [support@acme.example]   # never flagged (exact values, any case)
      deny: [Project Falcon]          # always flagged as ``deny`` (whole words, any case)

Each detector gets one action: ``redact`` (a typed placeholder, ``<EMAIL_1>``, before any
cache, store, ledger, trace or engine sees the text), ``block`` (a 400 naming the rule,
nothing charged or kept), ``local`` (only tiers whose engines run in this process may
serve it) or ``log`` (counted, let through). A key's own block replaces its tenant's.
``answer`` checks the model's answer too, through a window of ``window_chars`` that is
held back (docs/guardrails.md). ``fail_open``: a detector that fails lets the request
through (logged, counted) instead of a 503.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field, model_validator

from policies.frozen import Frozen

Action = Literal["redact", "block", "local", "log"]
# The deterministic recognizers (gateway/guardrails/recognizers.py), the tenant's deny
# list, and Presidio's names and addresses (the ``guard-ner`` extra).
Detector = Literal[
    "email",
    "phone",
    "card",
    "iban",
    "ssn",
    "ip",
    "secret",
    "aws_key",
    "bearer",
    "private_key",
    "deny",
    "person",
    "location",
]
NER_DETECTORS = frozenset({"person", "location"})
# The longest value with spaces in it (an IBAN in groups of four: 34 + 8): a window
# shorter than that could release the start of one before its end arrived.
MIN_WINDOW_CHARS = 48


class GuardrailsSpec(Frozen):
    detectors: dict[Detector, Action] = Field(min_length=1)
    restore: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    answer: bool = True
    window_chars: int = Field(64, ge=MIN_WINDOW_CHARS, le=4096)
    fail_open: bool = False
    # Presidio's score a name or address must reach (``person``, ``location`` only).
    ner_threshold: float = Field(0.6, gt=0, le=1)

    @model_validator(mode="after")
    def _deny_list(self) -> GuardrailsSpec:
        if self.deny and "deny" not in self.detectors:
            raise ValueError("guardrails.deny lists terms: give detectors.deny an action")
        if "deny" in self.detectors and not self.deny:
            raise ValueError("guardrails.detectors.deny needs terms in guardrails.deny")
        if any(not term.strip() for term in (*self.deny, *self.allow)):
            raise ValueError("guardrails.allow and guardrails.deny take non-empty terms")
        if self.restore and "redact" not in self.detectors.values():
            raise ValueError("guardrails.restore needs a detector whose action is redact")
        return self

    @property
    def ner(self) -> frozenset[str]:
        """The Presidio detectors this block asks for (empty: no NER at all)."""
        return NER_DETECTORS & frozenset(self.detectors)


def guardrails_problems(blocks: dict[str, GuardrailsSpec]) -> list[str]:
    """What ``tiergate check-config`` reports of the blocks (``tenants.T.guardrails`` or
    ``tenants.T.keys[K].guardrails`` → its block): NER asked for without its extra."""
    asked = [where for where, spec in blocks.items() if spec.ner]
    if not asked:
        return []
    try:  # found, not imported: the import takes seconds, and happens on first use
        installed = importlib.util.find_spec("presidio_analyzer") is not None
    except ValueError:  # in sys.modules as None: hidden on purpose (a test)
        installed = False
    if installed:
        return []
    return [
        f"{where} asks for person/location detection: install tiergate[guard-ner]"
        for where in asked
    ]
