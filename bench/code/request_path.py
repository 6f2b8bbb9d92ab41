"""The product code one cache-miss request runs through, counted.

    python -m bench.code.request_path                    # a streamed chat request
    python -m bench.code.request_path --path messages    # or: batch-line, embeddings
    python -m bench.code.request_path --path chat --path embeddings --json F   # several
    python -m bench.code.request_path --markdown         # the docs' table (--update-docs)
    PYTHONPATH=OLD python bench/code/request_path.py     # the same count on another checkout

Serves the fake three-tier config (``tiergate_testing.configs.fake_config``) with what a
cache miss on ``auto`` crosses: the shipped classifier (ONNX MiniLM), the exact and
semantic cache (in process), a tenant budget. One warm-up request loads what is lazy;
then a profile hook records, for one request with a prompt no earlier request sent, every
call into a product function (``gateway``, ``routers``, ``backends``, ``policies``), from
the route handler to the settlement task. The paths: a streamed chat or Messages request;
one line of a ``/v1/batches`` job, from the batch runner's ``_work`` (the job's first line
warms up; its last, which finishes the batch, is not counted); a ``/v1/embeddings`` call
(the classifier's MiniLM).

What it counts (calls, modules, the lifecycle, the routing stretch and its climbs) is
defined in ``bench.code.path_recorder``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx

if __package__:
    from bench.code.path_recorder import ROUTE_FUNCTION, PathRecorder, recording, route_function
else:  # ``PYTHONPATH=OLD python bench/code/request_path.py``: OLD's bench/ comes first
    from path_recorder import ROUTE_FUNCTION, PathRecorder, recording, route_function  # type: ignore[no-redef]
from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway

PATHS = {
    "chat": "a streamed `auto` chat request, a cache miss",
    "messages": "a streamed `auto` Messages request, a cache miss",
    "batch-line": "an `auto` line of a `/v1/batches` job, a cache miss",
    "embeddings": "a `/v1/embeddings` call",
}
EMBEDDING_MODEL = "all-minilm-l6-v2"  # the classifier's MiniLM, served in process
DOCS = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
BEGIN = "<!-- request_path: begin (python -m bench.code.request_path --update-docs) -->"
END = "<!-- request_path: end -->"


def config(path: str = "chat") -> dict[str, Any]:
    cfg = fake_config()
    cfg["cache"] = {"semantic": True}
    cfg["routing"] = {"classifier": {}}
    acme = cfg["tenants"]["acme"]
    acme["budget"] = {"limit_usd": 1000.0, "window": "daily"}
    acme["cache"] = {"max_temperature": 2.0}  # the default temperature (1.0) is cacheable
    if path == "embeddings":
        cfg["embeddings"] = {EMBEDDING_MODEL: {}}
        cfg["prices"][EMBEDDING_MODEL] = {"input": 0.02, "output": 0.0}
    if path == "batch-line":  # this replica's runner takes no line: ``batch_line`` runs them
        cfg["batches"] = {"enabled": False}
    return cfg


HEADERS = {"authorization": f"Bearer {TEST_KEY}"}
WARM_UP = "Warm up: list two prime numbers."
FRESH = f"Explain how a hash map resolves collisions ({os.getpid()})."  # a cache miss


def stream_once(client: httpx.Client, prompt: str, wire: str = "chat") -> int:
    body: dict[str, Any] = {
        "model": "auto",
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    path, headers = "/v1/chat/completions", HEADERS
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


def embed_once(client: httpx.Client, text: str) -> None:
    body = {"model": EMBEDDING_MODEL, "input": text}
    reply = client.post("/v1/embeddings", json=body, headers=HEADERS)
    reply.raise_for_status()
    assert len(reply.json()["data"][0]["embedding"]) > 0


def batch_job(client: httpx.Client, prompts: list[str]) -> str:
    """A ``/v1/batches`` job of one ``auto`` chat line per prompt, created as a client
    creates one (its input file uploaded, then the batch); its id."""
    lines = [
        json.dumps(
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "auto", "messages": [{"role": "user", "content": prompt}]},
            }
        )
        for i, prompt in enumerate(prompts)
    ]
    upload = ("input.jsonl", "\n".join(lines).encode() + b"\n")
    reply = client.post(
        "/v1/files", files={"file": upload}, data={"purpose": "batch"}, headers=HEADERS
    )
    reply.raise_for_status()
    body = {"input_file_id": reply.json()["id"], "endpoint": "/v1/chat/completions"}
    reply = client.post("/v1/batches", json={**body, "completion_window": "24h"}, headers=HEADERS)
    reply.raise_for_status()
    return str(reply.json()["id"])


async def _queued(gateway: RunningGateway, consumer: str, count: int) -> list[Any]:
    queue = gateway.state.core.parts.batches.queue
    lines: list[Any] = []
    deadline = time.monotonic() + 30
    while len(lines) < count:
        assert time.monotonic() < deadline, f"{len(lines)} of {count} batch lines queued"
        lines += await queue.read(consumer, count - len(lines))
        await asyncio.sleep(0.01)
    return sorted(lines, key=lambda line: line.index)


def batch_line(gateway: RunningGateway, client: httpx.Client, recorder: PathRecorder) -> None:
    """The second line of a three-line job, run by a ``BatchRunner`` built as the app
    builds its own: ``_work`` is what the runner's loop runs for each line it takes (this
    gateway's loop takes none: ``batches.enabled: false``)."""
    from gateway.app import FORMATS
    from gateway.batches.runner import BatchRunner

    state = gateway.state
    runner = BatchRunner(lambda: state.core, FORMATS, state.keys, state.tracing)
    prompts = [WARM_UP, FRESH, "Name one sorting algorithm."]
    batch_id = batch_job(client, prompts)
    warm_up, counted, last = gateway.call(_queued(gateway, runner.consumer, len(prompts)))
    gateway.call(runner._work(warm_up))
    with counting(gateway, recorder):
        gateway.call(runner._work(counted))
    gateway.call(runner._work(last))
    batch = client.get(f"/v1/batches/{batch_id}", headers=HEADERS).json()
    assert batch["request_counts"]["completed"] == len(prompts), batch


@contextmanager
def counting(gateway: RunningGateway, recorder: PathRecorder) -> Iterator[None]:
    """Records until every task the request started on the gateway's loop has ended: the
    handler runs on after the client read its last byte, the settlement is a task of its
    own."""
    earlier = gateway.call(_tasks())
    recorder.on = True
    try:
        yield
        gateway.call(_ended(earlier))
    finally:
        recorder.on = False


async def _tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks()


async def _ended(earlier: set[asyncio.Task[Any]], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while running := asyncio.all_tasks() - earlier - {asyncio.current_task()}:
        assert time.monotonic() < deadline, f"still running: {running}"
        await asyncio.wait(running, timeout=deadline - time.monotonic())


def count(path: str) -> dict[str, Any]:
    """One request of ``path`` counted, on a gateway of its own."""
    os.environ.setdefault("TIERGATE_TEST_KEY", TEST_KEY)
    route_module, route = route_function()
    recorder = PathRecorder(route)
    with recording(recorder), running_gateway(config(path)) as gateway:
        with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
            if path == "batch-line":
                batch_line(gateway, client, recorder)
            else:
                ask = embed_once if path == "embeddings" else partial(stream_once, wire=path)
                ask(client, WARM_UP)
                with counting(gateway, recorder):
                    ask(client, FRESH)
    found = recorder.summary()
    found["path"] = path
    found["route"] = f"{route_module}.{ROUTE_FUNCTION}"
    found["checkout"] = str(Path(sys.modules["gateway"].__file__ or "").parents[1])  # counted
    return found


def markdown(found: dict[str, Any]) -> str:
    """The docs' table of one path: the counts, the routing stops, the lifecycle's modules."""
    life, routing = found["lifecycle"], found["routing"]
    rows = [
        f"| {PATHS[found['path']]} | counted |",
        "|---|---|",
        f"| lifecycle calls / modules | {life['calls']} / {life['modules']} |",
        f"| `gateway/` packages crossed | {len(life['packages'])} |",
    ]
    if routing is not None:
        rows.append(
            f"| routing stretch from `{found['route']}`: stops / modules / climbs "
            f"(`routers` → `gateway`) | {routing['stops']} / {routing['modules']} / "
            f"{routing['climbs']} |"
        )
        stops = " → ".join(f"`{module}`" for module in routing["stop_list"])
        rows += ["", f"The routing stretch, stop by stop: {stops}."]
    rows += ["", "| lifecycle module | entered from (distinct call sites) |", "|---|---|"]
    rows += [f"| `{module}` | {n} |" for module, n in life["entered"].items()]
    return "\n".join(rows)


def docs_table(text: str) -> str:
    """The generated table as the docs hold it."""
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    if match is None:
        raise LookupError(f"no generated table between {BEGIN!r} and {END!r}")
    return match.group(1).rstrip("\n")


def update_docs(table: str) -> None:
    text = DOCS.read_text()
    old = f"{BEGIN}\n{docs_table(text)}".rstrip("\n") + "\n"
    DOCS.write_text(text.replace(old, f"{BEGIN}\n{table}\n", 1))


def report(found: dict[str, Any]) -> None:
    print(f"\n== {PATHS[found['path']]}: {found['functions']} product functions ran")
    for name in ("lifecycle", "all"):
        view = found[name]
        print(f"{name}: {view['calls']} calls through {view['modules']} modules")
    routing = found["routing"]
    if routing is not None:
        print(
            f"routing ({found['route']}, called {found['routing_calls']}x): "
            f"{routing['stops']} stops in {routing['modules']} modules, {routing['climbs']} climbs"
        )
        print("  " + "\n  ".join(routing["stop_list"]))
    print("lifecycle modules per package:")
    for package, n in found["lifecycle"]["packages"].items():
        print(f"  {n:3}  {package}")
    for name in ("lifecycle", "all"):
        print(f"\n{name}, entered from (distinct call sites in other modules):")
        for module, n in found[name]["entered"].items():
            print(f"  {n:3}  {module}")
    print("\nlifecycle calls:")
    for call in found["lifecycle"]["call_list"]:
        print(f"  {call}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=PATHS, action="append", help="repeatable (chat)")
    parser.add_argument("--json", type=Path, default=None, help="every path's count, by path")
    parser.add_argument("--markdown", action="store_true", help="each path's table")
    parser.add_argument("--update-docs", action="store_true", help=f"chat's into {DOCS.name}")
    args = parser.parse_args(argv)
    paths = args.path or ["chat"]
    if args.update_docs and "chat" not in paths:
        paths.append("chat")
    found = {path: count(path) for path in paths}
    for one in found.values():
        report(one)
        if args.markdown:
            print("\n" + markdown(one))
    if args.json is not None:
        args.json.write_text(json.dumps(found, indent=1))
    if args.update_docs:
        update_docs(markdown(found["chat"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
