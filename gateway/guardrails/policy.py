"""A ``guardrails:`` block made ready to run: its recognizers, its lists, its actions.

``policy_for(principal)`` is the caller's (the key's own block, else its tenant's, else
None: no guard at all). A block is compiled once per config snapshot it belongs to (a
reload brings new blocks; the cache holds the block itself, so an id is never reused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.guardrails.recognizers import Finding, find, resolve
from policies.guardrails_spec import Action, GuardrailsSpec
from policies.tenants import Principal

# The spec's detector names and the recognizers' (and the placeholders') types.
KIND_OF = {
    "email": "EMAIL",
    "phone": "PHONE",
    "card": "CARD",
    "iban": "IBAN",
    "ssn": "SSN",
    "ip": "IP",
    "secret": "SECRET",
    "aws_key": "AWS_KEY",
    "bearer": "BEARER",
    "private_key": "PRIVATE_KEY",
    "deny": "DENY",
    "person": "PERSON",
    "location": "LOCATION",
}
DETECTOR_OF = {kind: detector for detector, kind in KIND_OF.items()}
NER_KINDS = frozenset({"PERSON", "LOCATION"})


@dataclass(frozen=True, slots=True)
class Policy:
    spec: GuardrailsSpec
    actions: dict[str, Action]  # by type (``EMAIL``)
    kinds: frozenset[str]  # the deterministic recognizers' types it asks for
    ner: frozenset[str]  # PERSON / LOCATION, through Presidio
    allow: frozenset[str]  # casefolded values never flagged
    deny: re.Pattern[str] | None

    @property
    def restore(self) -> bool:
        return self.spec.restore

    def find(self, text: str) -> list[Finding]:
        """The values in ``text`` this policy acts on (NER's apart: ``gateway.guardrails.ner``)."""
        found = find(text, self.kinds) if self.kinds else []
        if self.deny is not None:
            found.extend(
                Finding("DENY", m.start(), m.end(), m.group()) for m in self.deny.finditer(text)
            )
            found = resolve(found)
        if self.allow and found:
            found = [f for f in found if f.value.casefold() not in self.allow]
        return found


def compile_policy(spec: GuardrailsSpec) -> Policy:
    actions = {KIND_OF[detector]: action for detector, action in spec.detectors.items()}
    deny = None
    if spec.deny:
        terms = sorted(spec.deny, key=len, reverse=True)
        alternatives = "|".join(re.escape(term.strip()) for term in terms)
        deny = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)
    return Policy(
        spec,
        actions,
        frozenset(actions) - NER_KINDS - {"DENY"},
        frozenset(actions) & NER_KINDS,
        frozenset(value.casefold() for value in spec.allow),
        deny,
    )


_compiled: dict[int, tuple[GuardrailsSpec, Policy]] = {}


def policy_of(spec: GuardrailsSpec) -> Policy:
    held = _compiled.get(id(spec))
    if held is not None and held[0] is spec:
        return held[1]
    if len(_compiled) > 4096:  # many reloads: start again rather than grow
        _compiled.clear()
    policy = compile_policy(spec)
    _compiled[id(spec)] = (spec, policy)  # the spec is held, so its id is not reused
    return policy


def spec_for(principal: Principal) -> GuardrailsSpec | None:
    """The key's own block, else its tenant's (None: nothing to guard)."""
    tenant = principal.policy
    for key in tenant.keys:
        if key.id == principal.key_id and key.guardrails is not None:
            return key.guardrails
    return tenant.guardrails


def policy_for(principal: Principal) -> Policy | None:
    spec = spec_for(principal)
    return None if spec is None else policy_of(spec)
