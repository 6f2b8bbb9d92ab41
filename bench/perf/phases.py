"""What the overhead bench (``bench/perf/overhead.py``) asks each gateway: its closed-loop
phases (a model of the local upstream, streamed or not, at a concurrency, in a wire
format) and the chat messages every phase sends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str
    model: str
    stream: bool
    concurrency: int
    api: str = "chat"  # the wire format: a key of bench.perf.wire_formats.WIRE_FORMATS


PHASES = (
    Phase("0ms c1", "bench-0ms", False, 1),
    Phase("0ms c16", "bench-0ms", False, 16),
    Phase("0ms c64", "bench-0ms", False, 64),
    Phase("20ms c1", "bench-20ms", False, 1),
    Phase("20ms c16", "bench-20ms", False, 16),
    Phase("20ms c64", "bench-20ms", False, 64),
    Phase("stream c16", "bench-stream", True, 16),
    Phase("stream c64", "bench-stream", True, 64),
)
# The full pipeline asks for ``auto``; its tiers all pass through to the 0 ms upstream,
# so it is compared with passthrough and direct calls on that same upstream.
PIPELINE_PHASES = (
    Phase("pipe 0ms c1", "bench-0ms", False, 1),
    Phase("pipe 0ms c16", "bench-0ms", False, 16),
    Phase("pipe stream c16", "bench-0ms", True, 16),
)
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Summarise the benefits of connection pooling in two lines."},
]
