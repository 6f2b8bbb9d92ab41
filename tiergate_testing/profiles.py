"""What the fake upstream answers for one model: the text, the pace, an injected fault."""

from __future__ import annotations

from dataclasses import dataclass, replace

WORD = "tok "


@dataclass(frozen=True, slots=True)
class Profile:
    delay_s: float = 0.0  # before the answer (non-streaming) or the first chunk (streaming)
    chunks: int = 16  # completion tokens, one chunk each when streaming
    gap_s: float = 0.0  # between streamed chunks
    word: str = WORD  # the text of each chunk
    words: tuple[str, ...] = ()  # ... or these texts, one chunk each (then ``chunks`` is theirs)
    stamp: bool = False  # streamed text is "@<time.monotonic()>@ ": the client can tell
    # the gaps the upstream made from those added on the way
    usage: bool = True  # False: report no usage, as some providers do
    prompt_tokens: int | None = None  # reported; None: a quarter of the body's bytes
    cached_tokens: int = 0
    fail_status: int | None = None  # answer with this HTTP status and an OpenAI error body
    fail_error: dict[str, object] | None = None  # ... whose "error" is this (a provider's)
    fail_after_chunks: int | None = None  # streaming: drop the connection after N chunks
    stall_after_chunks: int | None = None  # streaming: send nothing more after N chunks

    def texts(self, max_tokens: object) -> list[str]:
        """The completion's chunk texts, cut at the request's ``max_tokens``."""
        texts = list(self.words) if self.words else [self.word] * self.chunks
        if isinstance(max_tokens, int) and max_tokens > 0:
            return texts[:max_tokens]
        return texts


BENCH_PROFILES: dict[str, Profile] = {
    "bench-0ms": Profile(),
    "bench-20ms": Profile(delay_s=0.020),
    "bench-stream": Profile(delay_s=0.020, chunks=32, gap_s=0.010, stamp=True),
}

# What a hosted provider looks like to the gateway's tests: a fixed sentence (cut at
# max_tokens), usage with cached tokens, and two refusals with the bodies providers send.
GREETING = Profile(
    words=("Hello", " from", " the", " upstream", " server", "."), prompt_tokens=7, cached_tokens=3
)
PROVIDER_ERRORS: dict[str, Profile] = {
    "reject-me": Profile(
        fail_status=400,
        fail_error={"message": "bad model", "type": "invalid_request_error", "param": "model"},
    ),
    "unauthorized": Profile(
        fail_status=401,
        fail_error={
            "message": "Incorrect API key provided: sk-live-abcdef123456 for "
            "https://10.0.0.7:8443/v1 (org org-42)",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        },
    ),
}
# ... and the whole provider look-alike: those, plus ``no-usage`` (a provider that reports
# no usage at all, whole or streamed).
PROVIDER_MODELS: dict[str, Profile] = {
    **PROVIDER_ERRORS,
    "no-usage": replace(GREETING, usage=False),
}
