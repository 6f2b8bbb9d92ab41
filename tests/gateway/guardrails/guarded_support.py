"""A guarded gateway for the end-to-end tests: a local tier (the in-process fake), a
remote tier (``openai`` onto a fake upstream that keeps every body), real Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import redis

from tests.gateway.budget_support import REDIS_URL, redis_prefix
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.profiles import Profile
from tiergate_testing.upstream import Upstream, running_upstream

CARD = "4111 1111 1111 1111"
EMAIL = "jane.doe@example.com"
KEY = "sk-proj-abcDEF1234567890abcdefXYZ"
SSN = "123-45-6789"
IBAN = "DE89 3704 0044 0532 0130 00"
PLANTED = (CARD, EMAIL, KEY, SSN, IBAN, "4111111111111111", "jane.doe")
RESTORE_KEY = "tg-guard-restore-key-0001"
OPEN_KEY = "tg-guard-plain-key-000002"
BLOCK_KEY = "tg-guard-block-key-000003"
ADMIN_KEY = "tg-guard-admin-key-000004"
ANSWER = (
    f"Sure. The card on file is {CARD}, the contact is {EMAIL} and the API key "
    f"is {KEY}. Anything else I can help with today?"
)
# Models on the remote tier whose answers carry the values cut into pieces of n chars.
CUTS = (1, 2, 3, 5, 7, 11)
GUARD = {
    "detectors": {
        "email": "redact",
        "card": "redact",
        "secret": "redact",
        "ssn": "local",
        "iban": "block",
    },
    "window_chars": 48,
}


def pieces(size: int) -> tuple[str, ...]:
    return tuple(ANSWER[i : i + size] for i in range(0, len(ANSWER), size))


@dataclass
class Guarded:
    gateway: RunningGateway
    upstream: Upstream
    prefix: str

    def chat(self, key: str = TEST_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=key, max_retries=0)

    def messages(self, key: str = TEST_KEY) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.gateway.base_url, api_key=key, max_retries=0)

    @property
    def bodies(self) -> list[dict[str, object]]:
        return self.upstream.stats.bodies

    def redis_text(self) -> str:
        """Every value of every key under this gateway's prefixes, as one text."""
        client = redis.Redis.from_url(REDIS_URL)
        out: list[str] = []
        try:
            for key in client.scan_iter(match=f"{self.prefix}*", count=1000):
                out.append(key.decode(errors="replace"))
                out.append(_value(client, key))
        finally:
            client.close()
        return "\n".join(out)


def _value(client: redis.Redis, key: bytes) -> str:
    kind = client.type(key).decode()
    raw: Any
    if kind == "string":
        raw = client.get(key)
    elif kind == "hash":
        raw = client.hgetall(key)
    elif kind == "list":
        raw = client.lrange(key, 0, -1)
    elif kind == "set":
        raw = client.smembers(key)
    elif kind == "zset":
        raw = client.zrange(key, 0, -1, withscores=True)
    elif kind == "stream":
        raw = client.xrange(key)
    else:  # vector sets and others: their names and attributes
        raw = kind
    return repr(raw)


def guarded_config(upstream: Upstream, prefix: str) -> dict[str, Any]:
    config = fake_config()
    config["engines"] = {"local": config["engines"]["fake-small"]}
    config["engines"]["remote"] = {
        "backend": "openai",
        "model": "up-m",
        "options": {"api_base": upstream.base_url},
    }
    for size in CUTS:
        config["engines"][f"cut-{size}"] = {
            "backend": "openai",
            "model": f"cut-{size}",
            "options": {"api_base": upstream.base_url},
        }
    config["tiers"] = {
        "small": {"engines": ["local"]},
        "large": {"engines": ["remote"]},
        **{f"cut{size}": {"engines": [f"cut-{size}"]} for size in CUTS},
    }
    config["prices"] = {
        "fake-small": {"input": 0.1, "output": 0.2},
        "up-m": {"input": 1.0, "output": 1.0},
        **{f"cut-{size}": {"input": 1.0, "output": 1.0} for size in CUTS},
    }
    config["tenants"] = {
        "acme": {
            "keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}],
            "default_tier": "large",  # auto goes remote unless the guard keeps it local
            "allow_tier_header": True,
            "guardrails": GUARD,
        },
        "restorer": {
            "keys": [
                {"id": "r-1", "from_env": "TIERGATE_GUARD_RESTORE_KEY"},
                # a key's own block replaces its tenant's: this one has none of it
                {
                    "id": "r-2",
                    "from_env": "TIERGATE_GUARD_PLAIN_KEY",
                    "guardrails": {"detectors": {"ip": "log"}, "answer": False},
                },
            ],
            "guardrails": {**GUARD, "restore": True},
        },
        "blocker": {
            "keys": [{"id": "b-1", "from_env": "TIERGATE_GUARD_BLOCK_KEY"}],
            "guardrails": {"detectors": {"card": "block", "email": "redact"}, "window_chars": 48},
        },
    }
    config["admin"] = {"key_from_env": "TIERGATE_GUARD_SUPPORT_ADMIN_KEY"}
    config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
    # the exact and the semantic cache (the shipped static embedder: no model to build)
    config["cache"] = {"semantic": True, "key_prefix": f"{prefix}:cache"}
    config["routing"] = {"classifier": {"embedder": "static", "workers": 0}}
    for tenant in config["tenants"].values():
        tenant["cache"] = {"semantic_verify": "strict"}
    return config


@contextmanager
def guarded_gateway() -> Iterator[Guarded]:
    os.environ["TIERGATE_GUARD_RESTORE_KEY"] = RESTORE_KEY
    os.environ["TIERGATE_GUARD_PLAIN_KEY"] = OPEN_KEY
    os.environ["TIERGATE_GUARD_BLOCK_KEY"] = BLOCK_KEY
    os.environ["TIERGATE_GUARD_SUPPORT_ADMIN_KEY"] = ADMIN_KEY
    profiles = {f"cut-{size}": Profile(words=pieces(size)) for size in CUTS}
    echo = Profile(words=("Noted", ": ", "I will write to <EMAIL_1>", " soon."))
    with redis_prefix() as prefix, running_upstream(profiles, default=echo) as upstream:
        with running_gateway(guarded_config(upstream, prefix)) as gateway:
            yield Guarded(gateway, upstream, prefix)
