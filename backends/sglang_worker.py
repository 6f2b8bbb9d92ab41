"""The process that owns one ``sglang.Engine`` (run as ``python -m backends.sglang_worker``).

SGLang's configuration is process-global and ``Engine.shutdown`` kills every child of
its process, so each engine lives alone in a worker process the gateway starts and
supervises. The bridge is newline-delimited JSON: requests on stdin, events on the
original stdout (fd 1 is then pointed at stderr so library prints cannot corrupt it).

gateway → worker   {"op": "generate", "id", "prompt" | "messages", "sampling": {...},
                    "tools": [...] | null (for the chat template), "parse_calls": bool}
                   {"op": "abort", "id"}   {"op": "shutdown"}
worker → gateway   {"op": "ready"}  {"op": "loads", "running", "waiting", "kv_usage", ...}
                   {"op": "out", "id", "text": delta, "finish": str|null, "usage": {...},
                    "calls": [item...], "final_calls": [item...]}
                   {"op": "error", "id", "kind": "rejected"|"overloaded"|"failed", "message"}

With ``parse_calls`` the text goes through SGLang's ``FunctionCallParser`` (the
``tool_call_parser`` named in the worker config): ``text`` is then its normal text,
``calls`` the ``ToolCallItem`` objects it streamed (as ``{"tool_index", "name",
"parameters"}``: a call's first item names it, later ones carry argument fragments) and, on the last
event, ``final_calls`` its one-shot reading of the whole text (``parse_non_stream``).

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


class FunctionCalls:
    """SGLang's ``FunctionCallParser`` over one request's output: the one place this
    worker calls into sglang's function-call code (``module`` is
    ``sglang.srt.function_call.function_call_parser``, which also exports the ``Tool``
    model the parser reads)."""

    def __init__(self, module: Any, parser: str, tools: list[dict[str, Any]]) -> None:
        self.module = module
        self.parser = parser
        self.tools = [module.Tool.model_validate(t) for t in tools]
        self.stream = self._parser()
        self.text = ""

    def _parser(self) -> Any:
        return self.module.FunctionCallParser(tools=self.tools, tool_call_parser=self.parser)

    def feed(self, delta: str) -> tuple[str, list[dict[str, Any]]]:
        self.text += delta
        normal, items = self.stream.parse_stream_chunk(delta)
        return str(normal or ""), [_item(i) for i in items]

    def finish(self) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        """Held-back text and items (``parse_stream_end``, in newer sglang), and the
        calls a fresh parser reads from the whole text."""
        normal, items = "", []
        end = getattr(self.stream, "parse_stream_end", None)
        if end is not None:
            normal, items = end()
        _, whole = self._parser().parse_non_stream(self.text)
        return str(normal or ""), [_item(i) for i in items], [_item(i) for i in whole]


def _item(item: Any) -> dict[str, Any]:
    """A ``ToolCallItem`` as the bridge sends it."""
    return {"tool_index": item.tool_index, "name": item.name, "parameters": item.parameters or ""}


class Bridge:
    def __init__(
        self,
        engine: Any,
        out: BinaryIO,
        *,
        incremental: bool,
        function_calls: tuple[Any, str] | None = None,
    ) -> None:
        self.engine = engine
        self.out = out
        self.incremental = incremental
        self.function_calls = function_calls  # (parser module, tool_call_parser name)
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def send(self, message: Mapping[str, Any]) -> None:
        self.out.write(orjson.dumps(message) + b"\n")
        self.out.flush()

    def render(self, request: Mapping[str, Any]) -> str:
        if request.get("prompt") is not None:
            return str(request["prompt"])
        tokenizer = self.engine.tokenizer_manager.tokenizer
        tools = request.get("tools")
        try:
            rendered: str = tokenizer.apply_chat_template(
                request["messages"], tokenize=False, add_generation_prompt=True, tools=tools
            )
        except (TemplateError, TypeError, KeyError):
            if not tools:
                raise
            # As SGLang's server: some templates (Mistral's) take the bare functions.
            rendered = tokenizer.apply_chat_template(
                request["messages"],
                tokenize=False,
                add_generation_prompt=True,
                tools=[t["function"] for t in tools],
            )
        return rendered

    def calls_for(self, request: Mapping[str, Any]) -> FunctionCalls | None:
        if not request.get("parse_calls"):
            return None
        if self.function_calls is None:
            raise ValueError("this engine has no tool_call_parser")
        module, parser = self.function_calls
        return FunctionCalls(module, parser, list(request.get("tools") or ()))

    async def generate(self, request: Mapping[str, Any]) -> None:
        rid = str(request["id"])
        try:
            prompt = self.render(request)
            calls = self.calls_for(request)
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
                if calls is not None:
                    message["text"], message["calls"] = calls.feed(delta)
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
                    if calls is not None:
                        tail, items, message["final_calls"] = calls.finish()
                        message["text"] += tail
                        message["calls"] += items
                if message["text"] or message.get("calls") or finish is not None:
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


def _function_calls(config: Mapping[str, Any]) -> tuple[Any, str] | None:
    parser = config.get("tool_call_parser")
    if parser is None:
        return None
    module = importlib.import_module(str(config["function_call_module"]))
    known = module.FunctionCallParser.ToolCallParserEnum
    if parser not in known:
        raise SystemExit(f"unknown tool_call_parser {parser!r}; sglang knows {sorted(known)}")
    return module, str(parser)


def _load_factory(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


async def main(config: Mapping[str, Any]) -> None:
    # Keep the protocol on the original stdout; everything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    server_args = dict(config.get("server_args") or {})
    factory = _load_factory(str(config.get("engine_factory", "sglang:Engine")))
    function_calls = _function_calls(config)  # a bad parser name fails before the engine
    engine = factory(**server_args)
    bridge = Bridge(
        engine,
        out,
        incremental=bool(server_args.get("incremental_streaming_output", False)),
        function_calls=function_calls,
    )
    try:
        await bridge.serve(float(config.get("load_interval_s", 0.5)))
    finally:
        with contextlib.suppress(ProcessLookupError):
            engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(orjson.loads(sys.argv[1])))
