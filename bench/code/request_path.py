"""The product code one streamed cache-miss request runs through, counted.

    python -m bench.code.request_path                     # a chat request: counts, calls
    python -m bench.code.request_path --format messages   # an Anthropic Messages request
    python -m bench.code.request_path --json F            # also as JSON
    PYTHONPATH=OLD python bench/code/request_path.py      # the same count on another checkout

Serves the fake three-tier config (``tiergate_testing.configs.fake_config``) with what a
cache miss on ``auto`` crosses: the shipped classifier (ONNX MiniLM), the exact and
semantic cache (in process), a tenant budget. One warm-up request loads what is lazy;
then a profile hook records, for one streamed ``auto`` request with a prompt no earlier
request sent, every call into a product function (``gateway``, ``routers``,
``backends``, ``policies``), from the route handler to the settlement task.

How it counts: a *call* is a distinct pair (calling product function, called product
function) whose two functions live in different modules (a call inside one module is
the module's own business, as is the event loop resuming a coroutine); a *module* is a
product module in which any function ran. ``entered`` is, per module, how many distinct
call sites in other modules call into it.

Two views: *all* product code, and the *lifecycle*: calls from one ``gateway`` module to
another, leaving out the ambient instrumentation every stage reaches through a context
variable (``gateway.telemetry.timing``, ``gateway.telemetry.tracing``,
``gateway.telemetry.metrics``), the ASGI plumbing below the route (``gateway.edge.server``,
``gateway.edge.error_boundary``), property reads and dataclass-generated methods: the
calls a reader follows to see the path.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import running_gateway

PACKAGES = ("gateway", "routers", "backends", "policies")
# By the module's last name, so the same count runs on a checkout from before the
# stage packages (``python -m bench.code.request_path --root OLD``).
AMBIENT = frozenset({"timing", "tracing", "metrics", "autoscale", "server", "error_boundary"})


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if isinstance(name, str) and name.split(".", 1)[0] in PACKAGES:
        return name
    return None


class PathRecorder:
    """A ``sys.setprofile`` hook that keeps product-to-product calls while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.functions: set[tuple[str, str]] = set()
        self.calls: set[tuple[str, str, str, str]] = set()  # caller module, fn, callee module, fn

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        module = _module(frame)
        code = frame.f_code
        if module is None or code.co_name == "<module>":
            return
        callee = code.co_qualname
        self.functions.add((module, callee))
        caller = frame.f_back
        while caller is not None and _module(caller) is None:
            caller = caller.f_back
        if caller is None:
            return
        caller_module = _module(caller)
        assert caller_module is not None
        if caller_module != module:
            self.calls.add((caller_module, caller.f_code.co_qualname, module, callee))

    def summary(self) -> dict[str, Any]:
        lifecycle = {c for c in self.calls if _lifecycle(*c)}
        return {"all": _view(self.calls), "lifecycle": _view(lifecycle)}


def _view(calls: set[tuple[str, str, str, str]]) -> dict[str, Any]:
    modules = sorted({m for a, _, b, _ in calls for m in (a, b)})
    entered: dict[str, int] = defaultdict(int)
    for _, _, callee_module, _ in calls:
        entered[callee_module] += 1
    packages: dict[str, int] = defaultdict(int)
    for module in modules:
        packages[module.rsplit(".", 1)[0]] += 1
    return {
        "modules": len(modules),
        "calls": len(calls),
        "packages": dict(sorted(packages.items())),
        "module_list": modules,
        "entered": dict(sorted(entered.items(), key=lambda kv: (-kv[1], kv[0]))),
        "call_list": [f"{a}:{f} -> {b}:{g}" for a, f, b, g in sorted(calls)],
    }


def _lifecycle(caller_module: str, _caller: str, module: str, callee: str) -> bool:
    ends = (caller_module, module)
    if not all(m.startswith("gateway.") for m in ends):
        return False
    if {m.rsplit(".", 1)[-1] for m in ends} & AMBIENT:
        return False
    return "__create_fn__" not in callee and not _is_property(module, callee)


def _is_property(module: str, qualname: str) -> bool:
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:  # a function's local: not a property
            return False
    return isinstance(vars(owner).get(name) if isinstance(owner, type) else None, property)


@contextmanager
def recording(recorder: PathRecorder) -> Iterator[None]:
    threading.setprofile(recorder.hook)  # the gateway's thread and the embedder's
    sys.setprofile(recorder.hook)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def config() -> dict[str, Any]:
    cfg = fake_config()
    cfg["cache"] = {"semantic": True}
    cfg["routing"] = {"classifier": {}}
    acme = cfg["tenants"]["acme"]
    acme["budget"] = {"limit_usd": 1000.0, "window": "daily"}
    acme["cache"] = {"max_temperature": 2.0}  # the default temperature (1.0) is cacheable
    return cfg


def stream_once(client: httpx.Client, prompt: str, wire: str = "chat") -> int:
    body: dict[str, Any] = {
        "model": "auto",
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    path, headers = "/v1/chat/completions", {"authorization": f"Bearer {TEST_KEY}"}
    if wire == "messages":
        path, headers = "/v1/messages", {"x-api-key": TEST_KEY}
        body["max_tokens"] = 64
    lines = 0
    with client.stream("POST", path, json=body, headers=headers) as reply:
        reply.raise_for_status()
        assert reply.headers["x-tiergate-cache"] == "miss", reply.headers
        for line in reply.iter_lines():
            lines += bool(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", choices=("chat", "messages"), default="chat")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    recorder = PathRecorder()
    with recording(recorder), running_gateway(config()) as gateway:
        with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
            stream_once(client, "Warm up: list two prime numbers.", args.format)
            recorder.on = True
            prompt = f"Explain how a hash map resolves collisions ({os.getpid()})."
            stream_once(client, prompt, args.format)
            # The settlement runs as its own task after the last byte: let it finish.
            gateway.call(_drain(_background(gateway.state)))
            recorder.on = False
    found = recorder.summary()
    found["format"] = args.format
    print(f"streamed cache miss ({args.format}), {len(recorder.functions)} product functions ran")
    for name in ("lifecycle", "all"):
        view = found[name]
        print(f"{name}: {view['calls']} calls through {view['modules']} modules")
    print("lifecycle modules per package:")
    for package, count in found["lifecycle"]["packages"].items():
        print(f"  {count:3}  {package}")
    for name in ("lifecycle", "all"):
        view = found[name]
        print(f"\n{name}, entered from (distinct call sites in other modules):")
        for module, count in view["entered"].items():
            print(f"  {count:3}  {module}")
    print("\nlifecycle calls:")
    for call in found["lifecycle"]["call_list"]:
        print(f"  {call}")
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


def _background(state: Any) -> set[Any]:
    """The settlement tasks, wherever the checkout under test keeps them."""
    parts = getattr(state, "parts", None)
    tasks: set[Any] = parts.money.background if parts is not None else state.background
    return tasks


async def _drain(tasks: set[Any]) -> None:
    import asyncio

    if tasks:
        await asyncio.wait(set(tasks))


if __name__ == "__main__":
    raise SystemExit(main())
