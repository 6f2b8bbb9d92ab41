"""Chat on vLLM the way vLLM's own server does it: its request model, its tool parsers and
its structured outputs.

A gateway request becomes vLLM's ``ChatCompletionRequest``; the parser named in the
engine's YAML (``tool_parser``: hermes, llama3_json…) adjusts it (``required`` and a named
function get a structural tag, so the call is schema-valid by construction) and turns the
generated text back into content and OpenAI-shaped ``tool_calls`` deltas. ``response_format``
becomes vLLM structured outputs through the request's own ``to_sampling_params``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from backends.base import GenerationRequest, TokenLogprob

# What every vLLM engine honours; tools need a tool parser in the engine's options.
BASE_CAPABILITIES = frozenset(
    {"response_format", "logprobs", "top_logprobs", "frequency_penalty", "presence_penalty"}
)
TOOL_CAPABILITIES = frozenset({"tools", "tool_choice", "parallel_tool_calls"})


def parser_class(tool_parser: str | None, tokenizer: Any) -> Any:
    """vLLM's parser class for ``tool_parser`` (``None`` without one); a name vLLM does not
    know, or a tokenizer the parser cannot use, fails at engine start.

    ``required`` and a named function take vLLM's JSON-schema path (the tool parser's
    ``supports_required_and_named``): the call is generated under a JSON schema built from
    the functions' ``parameters`` (``get_json_schema_from_tools``) and read back by vLLM's
    own required/named extraction, so its arguments are schema-valid by construction and
    compact (the engine runs with ``disable_any_whitespace``; xgrammar's structural tags
    allow free whitespace, which a weak model pads until ``max_tokens``). ``auto`` is the
    parser's own format, unconstrained, as OpenAI's non-strict tools."""
    if tool_parser is None:
        return None
    from vllm.parser import ParserManager

    composed = ParserManager.get_parser(
        tool_parser_name=tool_parser, enable_auto_tools=True, tokenizer=tokenizer
    )
    tool_cls = type(
        composed.tool_parser_cls.__name__,
        (composed.tool_parser_cls,),
        {"structural_tag_model": None, "supports_required_and_named": True},
    )
    return type(composed.__name__, (composed,), {"tool_parser_cls": tool_cls})


def vllm_request(request: GenerationRequest, model: str) -> Any:
    """vLLM's own request model for this chat request (validated by vLLM)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    s = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(m) for m in request.messages or ()],
        "stream": True,  # DELTA outputs, one piece at a time
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "seed": s.seed,
        "stop": list(s.stop) or None,
        "frequency_penalty": s.frequency_penalty,
        "presence_penalty": s.presence_penalty,
        "tools": [dict(t) for t in request.tools] if request.tools else None,
        "tool_choice": request.tool_choice,
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": dict(request.response_format) if request.response_format else None,
        "logprobs": request.logprobs or None,
        "top_logprobs": request.top_logprobs,
    }
    return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})


def uses_tools(vreq: Any) -> bool:
    return bool(vreq.tools) and vreq.tool_choice != "none"


def chat_params(vreq: Any) -> Any:
    """Chat template arguments as vLLM's server builds them: the tools go to the template."""
    tools = [t.model_dump() for t in vreq.tools] if vreq.tools else None
    return vreq.build_chat_params(None, "auto").with_defaults({"tools": tools})


def token_logprobs(
    token_ids: Sequence[int], entries: Sequence[Mapping[int, Any]] | None, top: int
) -> tuple[TokenLogprob, ...]:
    """vLLM's per-token logprob dicts (the sampled token plus the top ``top``) in the
    gateway's shape, one entry per generated token."""
    out: list[TokenLogprob] = []
    for token_id, entry in zip(token_ids, entries or (), strict=False):
        chosen = entry[token_id]
        token = chosen.decoded_token or ""
        ranked = sorted(entry.values(), key=lambda lp: lp.rank or 0)[:top]
        alternatives = tuple(
            (lp.decoded_token or "", float(lp.logprob), (lp.decoded_token or "").encode())
            for lp in ranked
        )
        out.append(TokenLogprob(token, float(chosen.logprob), token.encode(), alternatives))
    return tuple(out)


def delta_parts(message: Any) -> tuple[str, tuple[dict[str, Any], ...]]:
    """A vLLM ``DeltaMessage`` as (content text, OpenAI tool-call delta dicts)."""
    if message is None:
        return "", ()
    deltas = tuple(
        {k: v for k, v in tc.model_dump(exclude_none=True).items() if v not in ({}, "")}
        for tc in message.tool_calls or ()
    )
    return message.content or "", deltas
