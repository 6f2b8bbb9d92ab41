"""Cyclic garbage per request: what serving a request leaves for the garbage collector.

An object in a reference cycle is not freed when the request is done with it: only a
collection finds it. At the young-generation threshold the gateway serves with
(``gateway.app.GC_YOUNG_THRESHOLD``) a collection that finds tens of thousands of such
objects stops the event loop for tens of milliseconds: every stream in flight stalls
(docs/performance.md, "GC pauses and the stall"). ``Probe.garbage`` counts them: requests
sent with the collector off, then one collection, which returns what it found unreachable.

The gateway runs in this process on uvloop, as ``tiergate serve`` runs it; the upstream is
the fake one in a process of its own, and the client is the standard library's
``http.client``: neither adds cycles of its own to the count (the ``openai`` client and
httpx make some). Used by ``tests/gateway/test_reference_cycles.py`` and, as a report,
``bench/perf/gc_cycles.py``.
"""

from __future__ import annotations

import copy
import gc
import http.client
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvloop

from tiergate_testing.configs import TEST_KEY
from tiergate_testing.gateways import REPO, RunningGateway, running_gateway, subprocess_env
from tiergate_testing.net import free_port, wait_http

MESSAGES = [{"role": "user", "content": "Say hello in two words."}]


@dataclass(frozen=True)
class Route:
    path: str
    body: dict[str, Any]
    fresh_connection: bool = False  # a client that opens a connection per request


def routes(model: str) -> dict[str, Route]:
    """Every wire format, whole and streamed, asking for ``model`` (``auto``: routed)."""
    chat = {"model": model, "messages": MESSAGES}
    responses = {"model": model, "input": MESSAGES, "store": False}
    messages = {"model": model, "messages": MESSAGES, "max_tokens": 64}
    return {
        "chat": Route("/v1/chat/completions", chat),
        "chat stream": Route("/v1/chat/completions", {**chat, "stream": True}),
        "chat, a connection per request": Route("/v1/chat/completions", chat, True),
        "completions": Route("/v1/completions", {"model": model, "prompt": "Say hello."}),
        "responses": Route("/v1/responses", responses),
        "responses stream": Route("/v1/responses", {**responses, "stream": True}),
        "responses stored": Route("/v1/responses", {**responses, "store": True}),
        "messages": Route("/v1/messages", messages),
        "messages stream": Route("/v1/messages", {**messages, "stream": True}),
    }


def passthrough_config(upstream_url: str) -> dict[str, Any]:
    """One tier passing ``bench-0ms`` straight to the upstream (``upstream_url``: its
    ``/v1``), one tenant (key from ``TIERGATE_TEST_KEY``): bench/perf/overhead.py's
    passthrough with the tests' key."""
    options = {"api_base": upstream_url, "api_key": "sk-upstream"}
    return {
        "engines": {"bench-0ms": {"backend": "openai", "model": "bench-0ms", "options": options}},
        "tiers": {"small": {"engines": ["bench-0ms"]}},
        "prices": {"bench-0ms": {"input": 0.1, "output": 0.2}},
        "tenants": {"acme": {"keys": [{"id": "acme-1", "from_env": "TIERGATE_TEST_KEY"}]}},
    }


def routed_config(upstream_url: str) -> dict[str, Any]:
    """``auto`` over three tiers (each passing through to the upstream's ``bench-0ms``),
    through the classifier (the shipped model) and both caches, on the in-process store."""
    config = passthrough_config(upstream_url)
    options = {"api_base": upstream_url, "api_key": "sk-upstream", "upstream_model": "bench-0ms"}
    tiers = ("small", "medium", "large")
    config["engines"] = {
        tier: {"backend": "openai", "model": tier, "options": options} for tier in tiers
    }
    config["tiers"] = {tier: {"engines": [tier]} for tier in tiers}
    config["prices"] = {
        tier: {"input": 0.1 * 10**i, "output": 0.2 * 10**i} for i, tier in enumerate(tiers)
    }
    config["routing"] = {"classifier": {}}
    config["cache"] = {"semantic": True}
    config["tenants"]["acme"]["cache"] = {"max_temperature": 2.0}
    return config


@contextmanager
def upstream_process() -> Iterator[str]:
    """The fake upstream (``python -m tiergate_testing.upstream``); yields its ``/v1`` URL."""
    port = free_port()
    argv = [sys.executable, "-m", "tiergate_testing.upstream", "--port", str(port)]
    process = subprocess.Popen(
        argv, cwd=REPO, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", 30.0)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def gateway_on_uvloop(config: Mapping[str, Any]) -> Iterator[RunningGateway]:
    """``running_gateway`` on uvloop, the loop ``tiergate serve`` picks (the standard
    loop's socket transports make a cycle per connection of their own)."""
    with running_gateway(dict(config), new_loop=uvloop.new_event_loop) as gateway:
        yield gateway


def varied(route: Route, i: int) -> dict[str, Any]:
    """``route``'s body with a prompt no other request sends (``i`` and the clock): no
    cache hit, and the ``auto`` path embeds and classifies each."""
    body = copy.deepcopy(route.body)
    text = f"Say hello in two words. ({i} {time.monotonic_ns()})"
    if "prompt" in body:
        body["prompt"] = text
    else:
        key = "input" if "input" in body else "messages"
        body[key] = [{"role": "user", "content": text}]
    return body


@dataclass(frozen=True)
class Garbage:
    requests: int
    objects: int  # what one collection found unreachable after ``requests`` requests
    kinds: Counter[str]  # those objects by type

    @property
    def per_request(self) -> float:
        return self.objects / self.requests

    def top(self, n: int = 12) -> str:
        return ", ".join(f"{count} {kind}" for kind, count in self.kinds.most_common(n))


class Probe:
    """Sends a route's request to a gateway in this process over a keep-alive connection
    (or a new one per request) and reads the answer to its end."""

    def __init__(self, gateway: RunningGateway, key: str = TEST_KEY) -> None:
        self.port = gateway.port
        self.headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def send(self, route: Route, body: dict[str, Any] | None = None) -> dict[str, str]:
        """The answer's headers (its body read to the end)."""
        if route.fresh_connection:
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        payload = json.dumps(body or route.body)
        self.connection.request("POST", route.path, payload, self.headers)
        answer = self.connection.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise AssertionError(f"{route.path} answered {answer.status}: {data[:300]!r}")
        return dict(answer.getheaders())

    def garbage(self, route: Route, requests: int = 50, warmup: int = 5) -> Garbage:
        """Cyclic garbage left by ``requests`` requests of ``route`` after ``warmup``
        (first-use caches, lazy imports), each with a prompt of its own (``varied``)."""
        for i in range(warmup):
            self.send(route, varied(route, -1 - i))
        self.connection.close()  # the count includes one connection's end (a new one next)
        time.sleep(0.1)  # the server sees the close meanwhile
        was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)  # keep what is found, to say what it is
        try:
            for i in range(requests):
                self.send(route, varied(route, i))
            self.connection.close()
            time.sleep(0.2)  # settlement after the last byte (``on_close``) runs meanwhile
            found = gc.collect()
            kinds = Counter(type(o).__qualname__ for o in gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            if was_enabled:
                gc.enable()
        return Garbage(requests, found, kinds)
