"""One request's redactions: every value it found, its placeholder, and what was done.

A value gets one placeholder for the whole request (``<EMAIL_1>`` wherever the same
address appears, in any message), so the model can still tell two people apart and the
answer's placeholders can be restored for the caller (``restore``). ``walk`` redacts the
strings of a JSON-like value (a message, a stored record, a batch line), passing over
the fields that are not text (ids, roles, image data).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from gateway.guardrails.errors import GuardrailBlocked, GuardrailUnavailable
from gateway.guardrails.policy import DETECTOR_OF, Policy
from gateway.guardrails.recognizers import Finding

log = logging.getLogger(__name__)

# Fields whose strings are not a person's text: ids, roles, types, and media (a data URL
# of an image could spell anything); their values pass unchanged.
NOT_TEXT = frozenset(
    {
        "role",
        "type",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "name",
        "url",
        "image_url",
        "file_data",
        "file_id",
        "data",
        "detail",
        "media_type",
        "cache_control",
        "signature",
        "status",
        "object",
        "model",
        "format",
    }
)


class Redactor:
    """Redacts one request's texts by its policy and counts what it found."""

    def __init__(
        self, policy: Policy, *, enforce: bool = True, local_redacts: bool = False
    ) -> None:
        self.policy = policy
        # enforce=False: only redact (a stored record): block and local were decided on
        # the request, and what is kept must still hold no value.
        self.enforce = enforce
        self.local_redacts = local_redacts  # a value kept (a file): ``local`` redacts it
        self.placeholders: dict[str, str] = {}  # value -> placeholder
        self.values: dict[str, str] = {}  # placeholder -> value (for ``restore``)
        self.counts: Counter[tuple[str, str]] = Counter()  # (type, action) -> how many
        self.local = False  # a ``local`` value was found: in-process tiers only
        self._numbers: Counter[str] = Counter()

    def detector_failed(self, exc: Exception, what: str, refused: str) -> None:
        """A detector failed on ``what``: fail closed (503, ``refused`` says what the caller
        lost) or, where the tenant chose fail_open, let the text through and count it."""
        if not self.policy.spec.fail_open:
            log.warning("guardrail failed on %s, fail closed: %r", what, exc)
            raise GuardrailUnavailable(
                f"the guardrail could not check {what}; {refused}", detail=repr(exc)
            ) from exc
        log.warning("guardrail failed on %s, text let through (fail_open): %r", what, exc)
        self.counts[("ERROR", "fail_open")] += 1

    def placeholder(self, finding: Finding) -> str:
        held = self.placeholders.get(finding.value)
        if held is not None:
            return held
        self._numbers[finding.kind] += 1
        placeholder = f"<{finding.kind}_{self._numbers[finding.kind]}>"
        self.placeholders[finding.value] = placeholder
        self.values[placeholder] = finding.value
        return placeholder

    def text(self, text: str, where: str = "") -> str:
        if not text:
            return text
        found = self.policy.find(text)
        if self.policy.ner:
            from gateway.guardrails.ner import names_and_places

            found = names_and_places(self.policy, text, found)
        if not found:
            return text
        return self.apply(text, found, where)

    def apply(self, text: str, found: list[Finding], where: str = "") -> str:
        parts: list[str] = []
        last = 0
        for finding in found:
            action = self.policy.actions.get(finding.kind, "redact")
            if not self.enforce and action in ("block", "local"):
                action = "redact"
            elif self.local_redacts and action == "local":
                action = "redact"
            self.counts[(finding.kind, action)] += 1
            if action == "block":
                raise GuardrailBlocked(DETECTOR_OF.get(finding.kind, finding.kind), where)
            if action == "local":
                self.local = True
                continue
            if action == "log":
                continue
            parts.append(text[last : finding.start])
            parts.append(self.placeholder(finding))
            last = finding.end
        if last == 0:
            return text
        parts.append(text[last:])
        return "".join(parts)

    def walk(self, value: Any, where: str = "") -> Any:
        """``value`` with every text in it redacted (a new value; the old is unchanged)."""
        if isinstance(value, str):
            return self.text(value, where)
        if isinstance(value, Mapping):
            return {
                k: v if k in NOT_TEXT else self.walk(v, f"{where}.{k}" if where else k)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            walked = [self.walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return walked if isinstance(value, list) else tuple(walked)
        return value
