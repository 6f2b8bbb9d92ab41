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
from dataclasses import dataclass
from typing import Any

from backends import vllm_chat
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
from backends.tool_calls import ToolCallAssembly

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
        tool_parser: str | None = None,
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
        # ``tool_parser``: the vLLM tool parser for this model's call format (hermes…).
        self.tool_parser = tool_parser
        self.capabilities = vllm_chat.BASE_CAPABILITIES | (
            vllm_chat.TOOL_CAPABILITIES if tool_parser else frozenset()
        )
        self._parser_cls: Any = None
        self.stats = EngineStats()
        self.model_path = model_path or model
        self.device_ids = tuple(device_ids) if device_ids is not None else None
        self.env = dict(env or {})
        self.args = {**options, **(engine_args or {})}
        # ``engine_args: {scheduling_policy: priority}``: vLLM's scheduler runs a batch line
        # after waiting interactive requests and preempts it first under KV-cache pressure
        # (lower runs first; any priority but 0 is an error under the default, fcfs).
        self._ranked = self.args.get("scheduling_policy") == "priority"
        self.default_max_tokens = default_max_tokens
        self._engine: Any = None
        self._dead = False

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        factory = _stat_logger_factory(self.stats)
        # Building spawns the engine core and waits for it to load: off the event loop.
        engine = await asyncio.to_thread(self._build, factory)
        try:
            self._parser_cls = vllm_chat.parser_class(self.tool_parser, engine.renderer.tokenizer)
        except (KeyError, TypeError, ValueError):
            await asyncio.to_thread(engine.shutdown)
            raise
        self._engine = engine
        self._dead = False

    def _build(self, stat_logger: Any) -> Any:
        from vllm.config import StructuredOutputsConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=self.model_path,
            served_model_name=[self.model],
            disable_log_stats=True,  # our logger only; vLLM's default loggers stay off
            # Compact JSON under constraints: free whitespace lets a model pad forever.
            **{
                "structured_outputs_config": StructuredOutputsConfig(
                    backend="xgrammar", disable_any_whitespace=True
                ),
                **self.args,
            },
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

    def _max_tokens(self, request: GenerationRequest, room: int) -> int:
        """The client's ``max_tokens``, else the default capped by the room left."""
        if request.sampling.max_tokens is not None:
            return request.sampling.max_tokens
        return max(1, min(self.default_max_tokens, room))

    def _sampling(self, request: GenerationRequest, max_tokens: int) -> Any:
        """vLLM sampling for a plain prompt (``/v1/completions``)."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        s = request.sampling
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if s.temperature is None else s.temperature,
            top_p=1.0 if s.top_p is None else s.top_p,
            seed=s.seed,
            stop=list(s.stop) or None,
            frequency_penalty=s.frequency_penalty or 0.0,
            presence_penalty=s.presence_penalty or 0.0,
            logprobs=(request.top_logprobs or 0) if request.logprobs else None,
            output_kind=RequestOutputKind.DELTA,
        )

    async def _prepare(self, engine: Any, request: GenerationRequest) -> _Prepared:
        """The engine's own rendering (its chat template, its tokenizer, its length checks:
        with no ``max_tokens`` the prompt alone must fit), its sampling, and for chat with
        tools the tool parser that reads the output back."""
        from vllm.renderers.params import TokenizeParams

        max_len = engine.model_config.max_model_len
        params = TokenizeParams(
            max_total_tokens=max_len,
            max_output_tokens=request.sampling.max_tokens or 0,
            add_special_tokens=request.prompt is not None,
        )
        if request.prompt is not None:
            (prompt,) = await engine.renderer.render_cmpl_async(
                [{"prompt": request.prompt}], params
            )
            room = max_len - len(prompt.get("prompt_token_ids") or ())
            return _Prepared(prompt, self._sampling(request, self._max_tokens(request, room)))
        vreq = vllm_chat.vllm_request(request, self.model)
        parser = None
        if self._parser_cls is not None and vllm_chat.uses_tools(vreq):
            parser = self._parser_cls(
                engine.renderer.tokenizer, vreq.tools, model_config=engine.model_config
            )
            vreq = parser.adjust_request(vreq)
        _, (prompt,) = await engine.renderer.render_chat_async(
            [vreq.messages], vllm_chat.chat_params(vreq), params
        )
        prompt_ids = list(prompt.get("prompt_token_ids") or ())
        max_tokens = self._max_tokens(request, max_len - len(prompt_ids))
        defaults = engine.model_config.get_diff_sampling_param()
        sampling = vreq.to_sampling_params(max_tokens, defaults)
        return _Prepared(prompt, sampling, vreq, parser, prompt_ids)

    def _rank(self, request: GenerationRequest) -> int:
        return 1 if self._ranked and request.priority == "batch" else 0

    async def stream(self, request: GenerationRequest) -> AsyncIterator[Chunk]:
        from vllm.exceptions import GracefulHTTPError, VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

        engine = self._engine
        if engine is None or self._dead or engine.errored:
            raise EngineUnavailable(f"{self.name} is not running")
        field = unsupported_field(request, self.capabilities)
        if field is not None:  # tools without a tool parser in the engine's options
            raise UpstreamRejected(f"the vllm engine {self.name} cannot honour {field}", status=400)
        try:
            prep = await self._prepare(engine, request)
        except (VLLMClientError, ValueError, TypeError) as exc:
            raise UpstreamRejected(str(exc), status=400) from exc
        request_id = f"{request.request_id}-{self.name}-{next(_ids)}"
        self.counters.started += 1
        top = request.top_logprobs or 0
        calls = ToolCallAssembly()
        completion_tokens = 0
        finished = False
        try:
            async with contextlib.aclosing(
                engine.generate(
                    prep.prompt, prep.sampling, request_id, priority=self._rank(request)
                )
            ) as outputs:
                async for output in outputs:
                    piece = output.outputs[0]
                    ids = list(piece.token_ids)
                    completion_tokens += len(ids)
                    self.counters.generated_tokens += len(ids)
                    text, deltas = piece.text, tuple[dict[str, Any], ...]()
                    if prep.parser is not None:
                        message = prep.parser.parse_delta(
                            piece.text, ids, prep.vreq, prep.prompt_ids, finished=output.finished
                        )
                        text, deltas = vllm_chat.delta_parts(message)
                        calls.add(deltas)
                    logprobs = (
                        vllm_chat.token_logprobs(ids, piece.logprobs, top)
                        if request.logprobs
                        else None
                    )
                    if text or deltas or logprobs:
                        yield Chunk(text=text, tool_call_deltas=deltas or None, logprobs=logprobs)
                    if output.finished:
                        finished = True
                        usage = Usage(
                            prompt_tokens=len(output.prompt_token_ids or ()),
                            completion_tokens=completion_tokens,
                            cached_tokens=int(output.num_cached_tokens or 0),
                        )
                        whole = calls.whole()
                        reason = piece.finish_reason or "stop"
                        if whole and reason == "stop":
                            reason = "tool_calls"
                        yield Chunk(finish_reason=reason, usage=usage, tool_calls=whole)
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


@dataclass
class _Prepared:
    """A rendered request: the engine's prompt and sampling, and for chat vLLM's own
    request model and the tool parser that reads calls from the output."""

    prompt: Any
    sampling: Any
    vreq: Any = None
    parser: Any = None
    prompt_ids: list[int] | None = None
