"""A profile hook that records the product code a request runs through, and its views.

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
calls a reader follows to see the path. *All* also catches the gateway's own loops (the
key poll) when they wake during the request; the lifecycle does not.

The *routing stretch*: the modules of the product functions first called (a coroutine
resumed is not called again), in time order, under the core's routing call
(``ROUTE_MODULES``' ``route``, on its thread) until it returns, consecutive calls into
one module collapsed into one *stop*. A *climb* is a stop in ``routers.*`` followed by one in
``gateway.*``: the reader following the tier decision goes back up into the gateway.

``bench.code.request_path`` drives the requests; nothing here imports product code
before it runs, so the same hook counts another checkout's.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from types import CodeType, FrameType
from typing import Any

PACKAGES = ("gateway", "routers", "backends", "policies")
# By the module's last name, so the same count runs on a checkout from before the
# stage packages (``PYTHONPATH=OLD python bench/code/request_path.py``).
AMBIENT = frozenset({"timing", "tracing", "metrics", "autoscale", "server", "error_boundary"})
# Called by the interpreter (``gc.callbacks``) wherever a collection happens: not a call
# of the path's, and left out of every view.
INTERRUPTS = frozenset({"gc_pauses"})
# Where the serving core's routing call lives, newest home first: the first that imports.
ROUTE_MODULES = ("gateway.core.route", "gateway.routing.route")
ROUTE_FUNCTION = "route"
SUSPENDABLE = inspect.CO_COROUTINE | inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if isinstance(name, str) and name.split(".", 1)[0] in PACKAGES:
        return name
    return None


def _last(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def route_function() -> tuple[str, CodeType]:
    """The routing call's module and code, wherever this checkout keeps it."""
    for name in ROUTE_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the module exists, something it imports does not
                raise
            continue
        return name, getattr(module, ROUTE_FUNCTION).__code__
    raise LookupError(f"no {ROUTE_FUNCTION}() in any of {ROUTE_MODULES}")


class PathRecorder:
    """A ``sys.setprofile`` hook that keeps product-to-product calls while ``on``."""

    def __init__(self, route: CodeType) -> None:
        self.on = False
        self.route = route
        self.functions: set[tuple[str, str]] = set()
        self.calls: set[tuple[str, str, str, str]] = set()  # caller module, fn, callee module, fn
        self.entered: dict[int, FrameType] = {}  # coroutines begun: a later "call" resumes
        self.stretches: dict[int, list[str]] = {}  # id(a routing frame) -> modules called

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        module = _module(frame)
        code = frame.f_code
        if module is None or code.co_name == "<module>" or _last(module) in INTERRUPTS:
            return
        callee = code.co_qualname
        self.functions.add((module, callee))
        if not self._resumed(frame):
            self._stop(frame, module)
        caller = frame.f_back
        while caller is not None and _module(caller) is None:
            caller = caller.f_back
        if caller is None:
            return
        caller_module = _module(caller)
        assert caller_module is not None
        if caller_module != module:
            self.calls.add((caller_module, caller.f_code.co_qualname, module, callee))

    def _resumed(self, frame: FrameType) -> bool:
        if not frame.f_code.co_flags & SUSPENDABLE:
            return False
        if id(frame) in self.entered:
            return True
        self.entered[id(frame)] = frame  # held, so that its id is not reused
        return False

    def _stop(self, frame: FrameType, module: str) -> None:
        """A first call under a routing call (on its thread) is a stop of its stretch."""
        if frame.f_code is self.route:
            self.stretches[id(frame)] = [module]
            return
        outer = frame.f_back
        while outer is not None:
            if outer.f_code is self.route and id(outer) in self.stretches:
                self.stretches[id(outer)].append(module)
                return
            outer = outer.f_back

    def summary(self) -> dict[str, Any]:
        lifecycle = {c for c in self.calls if _lifecycle(*c)}
        stretches = list(self.stretches.values())
        return {
            "all": _view(self.calls),
            "lifecycle": _view(lifecycle),
            "routing": stretch_view(stretches[0]) if stretches else None,
            "routing_calls": len(stretches),
            "functions": len(self.functions),
        }


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


def stretch_view(called: list[str]) -> dict[str, Any]:
    """The stops, modules and climbs of the modules called under one routing call."""
    stops = [m for i, m in enumerate(called) if i == 0 or called[i - 1] != m]
    climbs = [
        f"{a} -> {b}"
        for a, b in pairwise(stops)
        if a.startswith("routers.") and b.startswith("gateway.")
    ]
    return {
        "stops": len(stops),
        "modules": len(set(stops)),
        "climbs": len(climbs),
        "stop_list": stops,
        "climb_list": climbs,
    }


def _lifecycle(caller_module: str, _caller: str, module: str, callee: str) -> bool:
    ends = (caller_module, module)
    if not all(m.startswith("gateway.") for m in ends):
        return False
    if {_last(m) for m in ends} & AMBIENT:
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
