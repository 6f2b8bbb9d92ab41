"""llama.cpp in this process (GGUF on CPU): the embedded default engine.

A ``Llama`` object is not safe for concurrent use, so each engine owns one model
and one worker thread; requests queue on an asyncio lock and tokens cross back to
the event loop through ``call_soon_threadsafe``. Cancelling the stream sets a flag
the worker checks between tokens, and the lock is released only after the worker
has stopped, so the next request never shares the model with a dying one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from backends.base import (
    FEATURES,
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    unsupported_field,
)
from backends.errors import (
    ContextExceeded,
    EngineError,
    EngineOverloaded,
    EngineUnavailable,
    UpstreamFailed,
    UpstreamRejected,
)
from backends.llamacpp_decode import Job, decode, prompt_param
from backends.llamacpp_tools import build_grammar, render_messages
from backends.model_files import part_paths, prepare_model
from backends.token_bound import fewest_tokens, max_token_bytes
from backends.tool_calls import tool_plan

_DONE = object()
# Everything but `passthrough` (fields only a remote server can honour).
CAPABILITIES = FEATURES - {"passthrough"}


class LlamaCppEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        model_path: str | None = None,
        model_parts: str | None = None,
        part_count: int | None = None,
        sha256: str | None = None,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        n_batch: int = 256,
        max_waiting: int = 64,
        default_max_tokens: int = 256,
    ) -> None:
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.capabilities = CAPABILITIES
        self.model_path = model_path
        self.parts = part_paths(model_parts, part_count or 0) if model_parts else []
        self.sha256 = sha256
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.n_batch = n_batch
        self.max_waiting = max_waiting
        self.default_max_tokens = default_max_tokens
        self._llama: Any = None
        self._formatter: Any = None
        self._template = ""
        self._token_bytes: int | None = None  # ``backends.token_bound``: None, no bound
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._running = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llama-{name}")

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Joined and checked against the digest before llama.cpp opens it (model_files).
        path = await loop.run_in_executor(
            self._executor,
            lambda: prepare_model(model_path=self.model_path, parts=self.parts, sha256=self.sha256),
        )
        self._llama, self._formatter = await loop.run_in_executor(self._executor, self._load, path)

    def _load(self, path: str) -> tuple[Any, Any]:
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        llama = Llama(
            model_path=path,
            n_ctx=self.n_ctx,
            n_threads=self.n_threads,
            n_batch=self.n_batch,
            verbose=False,
        )
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise EngineUnavailable(f"{path} carries no chat template")
        eos = llama.detokenize([llama.token_eos()]).decode(errors="ignore")
        bos = llama.detokenize([llama.token_bos()]).decode(errors="ignore")
        self._template = template
        self._token_bytes = max_token_bytes(llama)
        return llama, Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    async def aclose(self) -> None:
        async with self._lock:
            llama, self._llama = self._llama, None
            if llama is not None:
                await asyncio.get_running_loop().run_in_executor(self._executor, llama.close)
        self._executor.shutdown(wait=False)

    def load(self) -> EngineLoad:
        return EngineLoad(
            running=self._running, waiting=self._waiting, healthy=self._llama is not None
        )

    def render(self, request: GenerationRequest) -> tuple[str, tuple[str, ...]]:
        """The prompt text exactly as the model sees it, and the template's stop strings."""
        if request.prompt is not None:
            return request.prompt, ()
        plan = tool_plan(request.tools, request.tool_choice)
        messages = render_messages(request.messages or (), plan, self._template)
        rendered = self._formatter(messages=messages)
        stops = rendered.stop if isinstance(rendered.stop, list) else [rendered.stop]
        return rendered.prompt, tuple(s for s in stops if s)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        if self._llama is None:
            raise EngineUnavailable(f"{self.name} is not loaded")
        if self._waiting >= self.max_waiting:
            raise EngineOverloaded(f"{self.name} has {self._waiting} requests waiting")
        field = unsupported_field(request, self.capabilities)
        if field is not None:
            raise UpstreamRejected(f"the llamacpp backend cannot honour {field}", status=400)
        prompt, template_stops = self.render(request)
        if self._token_bytes is not None:
            # Certain to be over the context: refused before it waits for the model or
            # is tokenised (near the limit, ``decode`` counts exactly).
            least = fewest_tokens(prompt, self._token_bytes)
            if least >= self.n_ctx:
                raise ContextExceeded(least, self.n_ctx, at_least=True, param=prompt_param(request))
        plan = tool_plan(request.tools, request.tool_choice)
        try:
            grammar = build_grammar(plan, request.response_format)
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamRejected(f"cannot build a grammar for this schema: {exc}", 400) from exc
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        self._running += 1
        self.counters.started += 1
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        cancel = threading.Event()
        job = loop.run_in_executor(
            self._executor,
            self._generate,
            Job(request, prompt, template_stops, plan, grammar),
            queue,
            loop,
            cancel,
        )
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                if isinstance(item, EngineError):
                    raise item
                if isinstance(item, BaseException):
                    raise UpstreamFailed(f"llama.cpp failed: {item}") from item
                assert isinstance(item, Chunk)
                if item.finish_reason is not None:
                    finished = True
                yield item
        finally:
            cancel.set()
            # The model is free again only once the worker has returned.
            await asyncio.shield(job)
            self._running -= 1
            if finished:
                self.counters.finished += 1
            else:
                self.counters.aborted += 1
            self._lock.release()

    def _generate(
        self,
        job: Job,
        queue: asyncio.Queue[object],
        loop: asyncio.AbstractEventLoop,
        cancel: threading.Event,
    ) -> None:
        """Runs on the engine's thread; pushes ``Chunk``s, then ``_DONE``."""

        def put(item: object) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            for chunk in decode(
                self._llama,
                job,
                n_ctx=self.n_ctx,
                default_max_tokens=self.default_max_tokens,
                counters=self.counters,
                cancel=cancel,
            ):
                put(chunk)
        except (EngineError, RuntimeError, ValueError) as exc:
            put(exc)
        finally:
            put(_DONE)
