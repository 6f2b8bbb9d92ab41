"""SGLang behind the ``Engine`` protocol: one ``sglang.Engine`` per supervised worker process.

The worker (``backends.sglang_worker``) owns the engine; this side starts it, speaks
newline-delimited JSON over its stdin/stdout, routes events to per-request queues,
keeps the latest load snapshot, and notices death: when the worker's stdout closes,
every open stream fails with ``EngineUnavailable`` and ``load().healthy`` turns false,
so the pool routes around it and rebuilds it. The gateway process never shares a
process (or a process group) with SGLang.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import orjson

from backends import sglang_chat
from backends.base import (
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    Usage,
    unsupported_field,
)
from backends.errors import (
    EngineError,
    EngineOverloaded,
    EngineUnavailable,
    UpstreamFailed,
    UpstreamRejected,
)
from backends.stats import EngineStats

log = logging.getLogger(__name__)
_ids = itertools.count()
_ERRORS: dict[str, type[EngineError]] = {"overloaded": EngineOverloaded, "failed": UpstreamFailed}
_CLOSED = object()


class SglangEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        model_path: str | None = None,
        device_ids: Sequence[int] | None = None,
        server_args: Mapping[str, Any] | None = None,
        engine_factory: str = "sglang:Engine",
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = 900.0,
        stop_timeout_s: float = 30.0,
        load_interval_s: float = 0.5,
        default_max_tokens: int = 256,
        tool_call_parser: str | None = None,
        function_call_module: str = "sglang.srt.function_call.function_call_parser",
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        # ``tool_call_parser``: SGLang's name for this model's call format (hermes, qwen25…).
        self.tool_call_parser = tool_call_parser
        self.function_call_module = function_call_module
        self.capabilities = sglang_chat.BASE_CAPABILITIES | (
            sglang_chat.TOOL_CAPABILITIES if tool_call_parser else frozenset()
        )
        self.stats = EngineStats()
        self.server_args = {
            "model_path": model_path or model,
            # Compact JSON under constraints: free whitespace lets a model pad forever.
            "constrained_json_disable_any_whitespace": True,
            **(server_args or {}),
        }
        self.engine_factory = engine_factory
        self.env = dict(env or {})
        if device_ids is not None:
            self.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in device_ids)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.load_interval_s = load_interval_s
        self.default_max_tokens = default_max_tokens
        self.process: asyncio.subprocess.Process | None = None
        self._queues: dict[str, asyncio.Queue[object]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._alive = False
        self.exit_code: int | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        config = {
            "server_args": self.server_args,
            "engine_factory": self.engine_factory,
            "load_interval_s": self.load_interval_s,
            "tool_call_parser": self.tool_call_parser,
            "function_call_module": self.function_call_module,
        }
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "backends.sglang_worker",
            orjson.dumps(config).decode(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **self.env},
            start_new_session=True,  # SGLang's children die with it, never with us
            limit=64 * 1024 * 1024,
        )
        ready = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(ready))
        try:
            await asyncio.wait_for(ready, self.start_timeout_s)
        except (TimeoutError, EngineUnavailable):
            await self.aclose()
            raise EngineUnavailable(f"{self.name}: sglang worker did not start") from None
        self._alive = True

    async def _read(self, ready: asyncio.Future[None]) -> None:
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while line := await stdout.readline():
                event = orjson.loads(line)
                op = event.get("op")
                if op == "ready":
                    ready.set_result(None)
                elif op == "loads":
                    self.stats.observe_scheduler(
                        int(event["running"]), int(event["waiting"]), float(event["kv_usage"])
                    )
                elif (queue := self._queues.get(str(event.get("id")))) is not None:
                    queue.put_nowait(event)
        finally:
            self._alive = False
            self.exit_code = await self.process.wait()
            if not ready.done():
                ready.set_exception(EngineUnavailable(f"worker exited with {self.exit_code}"))
            for queue in self._queues.values():
                queue.put_nowait(_CLOSED)
            log.warning("sglang worker %s exited with %s", self.name, self.exit_code)

    async def aclose(self) -> None:
        process, self._alive = self.process, False
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(OSError):
                self._send({"op": "shutdown"})
            try:
                await asyncio.wait_for(process.wait(), self.stop_timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    # -- state -----------------------------------------------------------------------------

    def load(self) -> EngineLoad:
        snap = self.stats.snapshot()
        return EngineLoad(
            running=max(snap.running, self.counters.active),
            waiting=snap.waiting,
            kv_usage=snap.kv_usage,
            healthy=self._alive,
        )

    def unfinished(self) -> int:
        return len(self._queues)

    # -- requests --------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(orjson.dumps(message) + b"\n")

    def _sampling(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        params: dict[str, Any] = {"max_new_tokens": s.max_tokens or self.default_max_tokens}
        if s.temperature is not None:
            params["temperature"] = s.temperature
        if s.top_p is not None:
            params["top_p"] = s.top_p
        if s.seed is not None:
            params["sampling_seed"] = s.seed
        if s.stop:
            params["stop"] = list(s.stop)
        if s.frequency_penalty is not None:
            params["frequency_penalty"] = s.frequency_penalty
        if s.presence_penalty is not None:
            params["presence_penalty"] = s.presence_penalty
        return params

    def _message(self, rid: str, request: GenerationRequest) -> tuple[dict[str, Any], Any]:
        """The worker's ``generate`` message, and how to read calls from what comes back."""
        message: dict[str, Any] = {"op": "generate", "id": rid, "sampling": self._sampling(request)}
        if request.prompt is not None:
            message["prompt"] = request.prompt
            return message, sglang_chat.CallStream("text")
        try:
            chat = sglang_chat.prepare(request)
        except ValueError as exc:
            raise UpstreamRejected(str(exc), status=400) from exc
        message["sampling"].update(chat.sampling)
        message.update(messages=chat.messages, tools=chat.tools)
        message["parse_calls"] = chat.reading == "parser"
        return message, sglang_chat.CallStream(chat.reading, parallel=chat.parallel)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        if not self._alive:
            raise EngineUnavailable(f"{self.name} is not running")
        field = unsupported_field(request, self.capabilities)
        if field is not None:  # tools without a tool_call_parser in the engine's options
            raise UpstreamRejected(f"the sglang engine {self.name} cannot honour {field}")
        rid = f"{request.request_id}-{self.name}-{next(_ids)}"
        message, calls = self._message(rid, request)
        queue: asyncio.Queue[object] = asyncio.Queue()
        self._queues[rid] = queue
        self.counters.started += 1
        finished = False
        try:
            try:
                self._send(message)
            except (OSError, RuntimeError) as exc:  # the pipe is gone: the worker died
                raise EngineUnavailable(f"{self.name}: {exc}") from exc
            while True:
                event = await queue.get()
                if event is _CLOSED:
                    raise EngineUnavailable(f"{self.name} worker exited ({self.exit_code})")
                assert isinstance(event, dict)
                if event["op"] == "error":
                    kind = str(event.get("kind"))
                    text = f"{self.name}: {event.get('message')}"
                    if kind == "rejected":
                        raise UpstreamRejected(text, status=400)
                    raise _ERRORS.get(kind, UpstreamFailed)(text)
                for chunk in self._chunks(event, calls):
                    yield chunk
                if event["finish"] is not None:
                    finished = True
                    return
        finally:
            del self._queues[rid]
            if finished:
                self.counters.finished += 1
            else:
                self.counters.aborted += 1
                if self._alive:
                    with contextlib.suppress(OSError, RuntimeError):
                        self._send({"op": "abort", "id": rid})

    def _chunks(self, event: Mapping[str, Any], calls: sglang_chat.CallStream) -> list[Chunk]:
        """One worker event as chunks: content and call fragments, then the last chunk."""
        chunks: list[Chunk] = []
        if event["text"] or event.get("calls"):
            self.counters.generated_tokens += 1
            try:
                text, deltas = calls.feed(event["text"], event.get("calls") or ())
            except ValueError as exc:  # constrained output that is not a call array
                raise UpstreamFailed(f"{self.name}: {exc}") from exc
            if text or deltas:
                chunks.append(Chunk(text=text, tool_call_deltas=tuple(deltas) or None))
        if event["finish"] is not None:
            owed, whole = calls.finish(event.get("final_calls"))
            if owed:
                chunks.append(Chunk(tool_call_deltas=tuple(owed)))
            reason = event["finish"]
            if whole and reason == "stop":
                reason = "tool_calls"
            usage = Usage(**event["usage"])
            chunks.append(Chunk(finish_reason=reason, usage=usage, tool_calls=whole))
        return chunks
