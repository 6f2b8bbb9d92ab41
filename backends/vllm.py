"""vLLM's ``AsyncLLM`` in the gateway process: one engine per replica, DELTA streaming.

The engine core runs in a child process vLLM spawns; this side renders chat through
the engine's own renderer (its chat template and tokenizer), streams DELTA outputs,
aborts on cancel, and reads statistics from a per-engine stat logger (vLLM's
Prometheus registry is process-global, so several engines cannot share it).

``device_ids`` places an engine on its GPUs: ``CUDA_VISIBLE_DEVICES`` is set while the
engine core is spawned (the child inherits it), under a process-wide lock so two
engines built at once never see each other's devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from backends.base import (
    Chunk,
    EngineCounters,
    EngineLoad,
    GenerationRequest,
    Usage,
    unsupported_field,
)
from backends.errors import EngineOverloaded, EngineUnavailable, UpstreamFailed, UpstreamRejected
from backends.stats import EngineStats

_SPAWN_LOCK = threading.Lock()
_ids = itertools.count()

# YAML option name → AsyncEngineArgs field; anything else goes through ``engine_args``.
PASSTHROUGH = (
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "quantization",
    "kv_cache_dtype",
    "speculative_config",
    "max_num_queued_reqs",
    "dtype",
    "seed",
    "block_size",
    "enforce_eager",
    "tokenizer",
)


@contextlib.contextmanager
def _spawn_env(env: Mapping[str, str]) -> Iterator[None]:
    """Environment the engine core child inherits; restored once it is spawned."""
    if not env:  # nothing to place: engines may start side by side
        yield
        return
    with _SPAWN_LOCK:
        saved = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def _stat_logger_factory(stats: EngineStats) -> Any:
    """A per-engine vLLM stat logger class writing into ``stats`` (on the event loop)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class PoolStatLogger(StatLoggerBase):  # type: ignore[misc]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            # vLLM calls this from its output handler, which runs on our event loop.
            if scheduler_stats is not None:
                stats.observe_scheduler(
                    scheduler_stats.num_running_reqs,
                    scheduler_stats.num_waiting_reqs,
                    float(scheduler_stats.kv_cache_usage),
                )
                prefix = scheduler_stats.prefix_cache_stats
                if prefix is not None:
                    stats.observe_prefix(prefix.queries, prefix.hits)
            if iteration_stats is not None:
                stats.observe_latency(
                    list(iteration_stats.time_to_first_tokens_iter),
                    list(iteration_stats.inter_token_latencies_iter),
                    [f.queued_time for f in iteration_stats.finished_requests],
                )

        def log_engine_initialized(self) -> None:
            return None

    return PoolStatLogger


class VllmEngine:
    def __init__(
        self,
        *,
        name: str,
        model: str,
        model_path: str | None = None,
        device_ids: Sequence[int] | None = None,
        env: Mapping[str, str] | None = None,
        engine_args: Mapping[str, Any] | None = None,
        default_max_tokens: int = 256,
        **options: Any,
    ) -> None:
        unknown = set(options) - set(PASSTHROUGH)
        if unknown:
            raise ValueError(
                f"unknown vllm options {sorted(unknown)}; put other AsyncEngineArgs fields "
                "under options.engine_args"
            )
        self.name = name
        self.model = model
        self.counters = EngineCounters()
        self.capabilities: frozenset[str] = frozenset()
        self.stats = EngineStats()
        self.model_path = model_path or model
        self.device_ids = tuple(device_ids) if device_ids is not None else None
        self.env = dict(env or {})
        self.args = {**options, **(engine_args or {})}
        self.default_max_tokens = default_max_tokens
        self._engine: Any = None
        self._dead = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        factory = _stat_logger_factory(self.stats)
        # Building spawns the engine core and waits for it to load: off the event loop.
        self._engine = await asyncio.to_thread(self._build, factory)
        self._dead = False

    def _build(self, stat_logger: Any) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=self.model_path,
            served_model_name=[self.model],
            disable_log_stats=True,  # our logger only; vLLM's default loggers stay off
            **self.args,
        )
        env = dict(self.env)
        if self.device_ids is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in self.device_ids)
        with _spawn_env(env):
            return AsyncLLM.from_engine_args(args, stat_loggers=[stat_logger])

    async def aclose(self) -> None:
        engine, self._engine = self._engine, None
        self._dead = True
        if engine is not None:
            await asyncio.to_thread(engine.shutdown)

    # -- state -----------------------------------------------------------------------------

    @property
    def llm(self) -> Any:
        """The ``AsyncLLM`` itself, for tools that need more than the protocol."""
        return self._engine

    def unfinished(self) -> int:
        """Requests the engine still holds (vLLM's own count): 0 once every stream ended."""
        return 0 if self._engine is None else int(self._engine.get_num_unfinished_requests())

    def load(self) -> EngineLoad:
        engine = self._engine
        healthy = engine is not None and not self._dead and not engine.errored
        snap = self.stats.snapshot()
        return EngineLoad(
            running=max(snap.running, self.counters.active),
            waiting=snap.waiting,
            kv_usage=snap.kv_usage,
            healthy=healthy,
        )

    # -- requests --------------------------------------------------------------------------

    def _sampling(self, request: GenerationRequest, room: int | None = None) -> Any:
        """vLLM sampling; without a client ``max_tokens``, the default capped by ``room``."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        s = request.sampling
        max_tokens = s.max_tokens or self.default_max_tokens
        if s.max_tokens is None and room is not None:
            max_tokens = max(1, min(max_tokens, room))
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if s.temperature is None else s.temperature,
            top_p=1.0 if s.top_p is None else s.top_p,
            seed=s.seed,
            stop=list(s.stop) or None,
            output_kind=RequestOutputKind.DELTA,
        )

    async def _render(self, engine: Any, request: GenerationRequest, max_tokens: int) -> Any:
        """The engine's own rendering: its chat template, its tokenizer, its length checks
        (``max_tokens`` 0: the prompt alone must fit)."""
        from vllm.renderers.params import ChatParams, TokenizeParams

        max_len = engine.model_config.max_model_len
        if request.prompt is not None:
            params = TokenizeParams(
                max_total_tokens=max_len, max_output_tokens=max_tokens, add_special_tokens=True
            )
            (prompt,) = await engine.renderer.render_cmpl_async(
                [{"prompt": request.prompt}], params
            )
            return prompt
        params = TokenizeParams(
            max_total_tokens=max_len, max_output_tokens=max_tokens, add_special_tokens=False
        )
        chat = ChatParams(chat_template_kwargs={"add_generation_prompt": True})
        messages = [dict(m) for m in request.messages or ()]
        _, (prompt,) = await engine.renderer.render_chat_async([messages], chat, params)
        return prompt

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        from vllm.exceptions import GracefulHTTPError, VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        engine = self._engine
        if engine is None or self._dead or engine.errored:
            raise EngineUnavailable(f"{self.name} is not running")
        field = unsupported_field(request, self.capabilities)
        if field is not None:  # tool parsers and structured outputs: not wired up yet
            raise UpstreamRejected(f"the vllm backend cannot honour {field}", status=400)
        try:
            prompt = await self._render(engine, request, request.sampling.max_tokens or 0)
        except (VLLMClientError, ValueError, TypeError) as exc:
            raise UpstreamRejected(str(exc), status=400) from exc
        prompt_len = len(prompt.get("prompt_token_ids") or ()) if isinstance(prompt, dict) else 0
        sampling = self._sampling(request, engine.model_config.max_model_len - prompt_len)
        request_id = f"{request.request_id}-{self.name}-{next(_ids)}"
        self.counters.started += 1
        completion_tokens = 0
        finished = False
        try:
            async with contextlib.aclosing(
                engine.generate(prompt, sampling, request_id)
            ) as outputs:
                async for output in outputs:
                    piece = output.outputs[0]
                    completion_tokens += len(piece.token_ids)
                    self.counters.generated_tokens += len(piece.token_ids)
                    if piece.text:
                        yield Chunk(text=piece.text)
                    if output.finished:
                        finished = True
                        usage = Usage(
                            prompt_tokens=len(output.prompt_token_ids or ()),
                            completion_tokens=completion_tokens,
                            cached_tokens=int(output.num_cached_tokens or 0),
                        )
                        yield Chunk(finish_reason=piece.finish_reason or "stop", usage=usage)
        except GracefulHTTPError as exc:  # admission control: max_num_queued_reqs
            raise EngineOverloaded(f"{self.name}: {exc}") from exc
        except EngineDeadError as exc:
            self._dead = True
            raise EngineUnavailable(f"{self.name} died: {exc}") from exc
        except VLLMClientError as exc:
            raise UpstreamRejected(str(exc), status=400) from exc
        except EngineGenerateError as exc:
            raise UpstreamFailed(f"{self.name} failed: {exc.__cause__ or exc}") from exc
        finally:
            if finished:
                self.counters.finished += 1
            else:
                self.counters.aborted += 1
                if self._engine is not None and not self._dead:
                    # generate() aborts on GeneratorExit too; this covers a stream that
                    # is dropped between outputs. Aborting twice is a no-op in vLLM.
                    await engine.abort(request_id)
