"""Cache identity: what changes the exact key, what the semantic prefix keeps, policy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from backends.base import GenerationRequest, SamplingParams
from gateway.cache.keys import embedding_space, fingerprint
from gateway.cache.plan import cache_directives, cacheable
from policies.schema import CachePolicy
from policies.stores.cache.keys import CacheKeys, namespace


def chat(*messages: dict[str, Any], **sampling: Any) -> GenerationRequest:
    return GenerationRequest(
        request_id="r",
        model="small",
        sampling=SamplingParams(**{"temperature": 0.0, **sampling}),
        messages=tuple(messages),
    )


USER = {"role": "user", "content": "Tell me about owls."}


def test_every_output_changing_parameter_changes_the_exact_key() -> None:
    base = chat(USER)
    key = fingerprint("acme", "small", base).exact
    variants = [
        chat(USER, temperature=0.5),
        chat(USER, top_p=0.9),
        chat(USER, max_tokens=5),
        chat(USER, stop=("\n",)),
        chat(USER, seed=1),
        replace(base, tools=({"type": "function", "function": {"name": "f"}},)),
        replace(base, tool_choice="none"),
        replace(base, response_format={"type": "json_object"}),
        chat({"role": "user", "content": "Tell me about owls!"}),
    ]
    keys = {fingerprint("acme", "small", v).exact for v in variants}
    assert key not in keys and len(keys) == len(variants)
    assert fingerprint("globex", "small", base).exact != key
    assert fingerprint("acme", "medium", base).exact != key
    assert fingerprint("acme", "small", replace(base, request_id="other")).exact == key


def test_semantic_prefix_ignores_only_the_last_user_text() -> None:
    one = fingerprint("acme", "small", chat(USER))
    two = fingerprint("acme", "small", chat({"role": "user", "content": "Describe owls."}))
    assert one.prefix == two.prefix and one.exact != two.exact
    assert one.text == "Tell me about owls."
    system = {"role": "system", "content": "Answer as a pirate."}
    assert fingerprint("acme", "small", chat(system, USER)).prefix != one.prefix
    earlier = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    assert fingerprint("acme", "small", chat(*earlier, USER)).prefix != one.prefix
    assert fingerprint("acme", "small", chat(USER, max_tokens=9)).prefix != one.prefix
    assert fingerprint("globex", "small", chat(USER)).prefix != one.prefix
    # An image next to the same words is another question.
    image = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Tell me about owls."},
            {"type": "image_url", "image_url": {"url": "data:a"}},
        ],
    }
    assert fingerprint("acme", "small", chat(image)).prefix != one.prefix
    # Numbers in the compared text are part of the prefix: 5 km never meets 50 km.
    five = fingerprint("acme", "small", chat({"role": "user", "content": "Run 5 km"}))
    fifty = fingerprint("acme", "small", chat({"role": "user", "content": "Run 50 km"}))
    assert five.prefix != fifty.prefix


def test_namespaces_and_keys_cannot_collide() -> None:
    assert namespace("acme") == "acme"
    odd = namespace("ac}me:{x}")
    assert odd.startswith("h") and "{" not in odd and odd != namespace("ac}me:{y}")
    keys = CacheKeys("tg:cache", "acme")
    assert keys.entry("d").startswith("tg:cache:{acme}:")
    assert keys.order != keys.vectors


@pytest.mark.parametrize(
    ("temperature", "seed", "expected"),
    [(0.0, None, True), (None, None, False), (0.7, None, False), (0.7, 42, True)],
)
def test_default_policy_caches_only_deterministic_requests(
    temperature: float | None, seed: int | None, expected: bool
) -> None:
    request = chat(USER, temperature=temperature, seed=seed)
    assert cacheable(CachePolicy(), request) is expected
    assert cacheable(CachePolicy(cache_seeded=False), request) is (temperature == 0.0)
    assert cacheable(CachePolicy(max_temperature=1.0), chat(USER, temperature=0.7))


def test_cache_control_directives() -> None:
    assert cache_directives("No-Cache, max-age=0") == {"no-cache", "max-age"}
    assert cache_directives(None) == set()


def test_the_embedding_space_separates_semantic_entries_not_exact_ones() -> None:
    request = chat(USER)
    minilm = embedding_space("all-minilm-l6-v2/onnx-int8/128", 384)
    static = embedding_space("static-minilm-256/0123abcd/128", 256)
    one, two = (
        fingerprint("acme", "small", request, minilm),
        fingerprint("acme", "small", request, static),
    )
    assert one.exact == two.exact == fingerprint("acme", "small", request).exact
    assert one.prefix != two.prefix
    assert (
        CacheKeys("tg:cache", "acme", minilm).vectors
        != CacheKeys("tg:cache", "acme", static).vectors
    )
    assert CacheKeys("tg:cache", "acme").vectors == "tg:cache:{acme}:vset"
