"""The process that owns one ``sglang.Engine`` (run as ``python -m backends.sglang_worker``).

SGLang's configuration is process-global and ``Engine.shutdown`` kills every child of
its process, so each engine lives alone in a worker process the gateway starts and
supervises. The bridge is newline-delimited JSON: requests on stdin, events on the
original stdout (fd 1 is then pointed at stderr so library prints cannot corrupt it).

gateway → worker   {"op": "generate", "id", "prompt" | "messages", "sampling": {...}}
                   {"op": "abort", "id"}   {"op": "shutdown"}
worker → gateway   {"op": "ready"}  {"op": "loads", "running", "waiting", "kv_usage", ...}
                   {"op": "out", "id", "text": delta, "finish": str|null, "usage": {...}}
                   {"op": "error", "id", "kind": "rejected"|"overloaded"|"failed", "message"}

SGLang streams the *cumulative* text by default (``incremental_streaming_output``
off) and the increment when it is on; this worker sends increments either way.
``meta_info.finish_reason`` is ``None`` until the end, then a dict such as
``{"type": "stop", "matched": 2}``, ``{"type": "length", "length": 16}`` or
``{"type": "abort", "message": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any, BinaryIO

import orjson
from jinja2 import TemplateError

FINISH_TYPES = {"stop": "stop", "length": "length"}


class Bridge:
    def __init__(self, engine: Any, out: BinaryIO, *, incremental: bool) -> None:
        self.engine = engine
        self.out = out
        self.incremental = incremental
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def send(self, message: Mapping[str, Any]) -> None:
        self.out.write(orjson.dumps(message) + b"\n")
        self.out.flush()

    def render(self, request: Mapping[str, Any]) -> str:
        if request.get("prompt") is not None:
            return str(request["prompt"])
        tokenizer = self.engine.tokenizer_manager.tokenizer
        rendered: str = tokenizer.apply_chat_template(
            request["messages"], tokenize=False, add_generation_prompt=True
        )
        return rendered

    async def generate(self, request: Mapping[str, Any]) -> None:
        rid = str(request["id"])
        try:
            prompt = self.render(request)
            outputs = await self.engine.async_generate(
                prompt=prompt, sampling_params=dict(request["sampling"]), stream=True, rid=rid
            )
            sent = 0
            async for output in outputs:
                text = str(output.get("text") or "")
                delta = text if self.incremental else text[sent:]
                sent = sent + len(delta) if self.incremental else len(text)
                meta = output.get("meta_info") or {}
                finish = meta.get("finish_reason")
                message: dict[str, Any] = {"op": "out", "id": rid, "text": delta, "finish": None}
                if finish is not None:
                    kind = finish.get("type") if isinstance(finish, Mapping) else str(finish)
                    if kind == "abort":
                        reason = finish.get("message") if isinstance(finish, Mapping) else None
                        self.send({"op": "error", "id": rid, "kind": "failed", "message": reason})
                        return
                    message["finish"] = FINISH_TYPES.get(str(kind), "stop")
                    message["usage"] = {
                        "prompt_tokens": int(meta.get("prompt_tokens", 0)),
                        "completion_tokens": int(meta.get("completion_tokens", 0)),
                        "cached_tokens": int(meta.get("cached_tokens", 0) or 0),
                    }
                if delta or finish is not None:
                    self.send(message)
        except asyncio.CancelledError:
            self.engine.tokenizer_manager.abort_request(rid)
            raise
        except (ValueError, TypeError, KeyError, TemplateError) as exc:
            # the request cannot be rendered or sampled as sent (a chat template's
            # raise_exception is a jinja2 TemplateError)
            self.send({"op": "error", "id": rid, "kind": "rejected", "message": str(exc)})
        except Exception as exc:  # reported, never left waiting for request_timeout_s
            failure = f"{type(exc).__name__}: {exc}"
            self.send({"op": "error", "id": rid, "kind": "failed", "message": failure})
        finally:
            self.tasks.pop(rid, None)

    async def report_loads(self, interval_s: float) -> None:
        while True:
            snapshots = await self.engine.tokenizer_manager.get_loads()
            loads = [_as_dict(s) for s in snapshots]
            self.send(
                {
                    "op": "loads",
                    "running": sum(int(s.get("num_running_reqs", 0)) for s in loads),
                    "waiting": sum(int(s.get("num_waiting_reqs", 0)) for s in loads),
                    "kv_usage": max((float(s.get("token_usage", 0.0)) for s in loads), default=0),
                    "cache_hit_rate": max(
                        (float(s.get("cache_hit_rate", 0.0)) for s in loads), default=0.0
                    ),
                }
            )
            await asyncio.sleep(interval_s)

    async def serve(self, load_interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        loads = loop.create_task(self.report_loads(load_interval_s))
        self.send({"op": "ready", "pid": os.getpid()})
        try:
            while line := await reader.readline():  # EOF: the gateway is gone
                request = orjson.loads(line)
                op = request.get("op")
                if op == "generate":
                    rid = str(request["id"])
                    self.tasks[rid] = loop.create_task(self.generate(request))
                elif op == "abort":
                    task = self.tasks.get(str(request["id"]))
                    if task is not None:
                        task.cancel()
                elif op == "shutdown":
                    break
        finally:
            loads.cancel()
            for task in list(self.tasks.values()):
                task.cancel()
            await asyncio.gather(loads, *self.tasks.values(), return_exceptions=True)


def _as_dict(snapshot: Any) -> Mapping[str, Any]:
    if isinstance(snapshot, Mapping):
        return snapshot
    to_dict = getattr(snapshot, "to_dict", None)
    loads: Mapping[str, Any] = to_dict({"core"}) if to_dict is not None else vars(snapshot)
    return loads


def _load_factory(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


async def main(config: Mapping[str, Any]) -> None:
    # Keep the protocol on the original stdout; everything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    server_args = dict(config.get("server_args") or {})
    factory = _load_factory(str(config.get("engine_factory", "sglang:Engine")))
    engine = factory(**server_args)
    bridge = Bridge(
        engine, out, incremental=bool(server_args.get("incremental_streaming_output", False))
    )
    try:
        await bridge.serve(float(config.get("load_interval_s", 0.5)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(orjson.loads(sys.argv[1])))
