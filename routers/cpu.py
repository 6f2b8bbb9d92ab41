"""What this CPU offers the embedder's kernels, read once from ``/proc/cpuinfo``.

Why: ONNX Runtime's int8 matrix products are vectorised from AVX2 on, and faster still
with int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI, AMX). On an AVX2-only AMD
EPYC, the kind of core most cloud VMs give, the int8 MiniLM cost 1.3-1.7x less CPU than
its fp32 graph (``bench/perf/embed_cpu.py``, docs/performance.md), so ``quantize: auto``
takes int8 there and above, and the float graph (the model's own vectors) only on a CPU
without AVX2, where nothing was measured.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

INT8_DOT = ("amx_int8", "avx512_vnni", "avx_vnni")  # strongest first
INT8_VECTOR = ("avx2", *INT8_DOT)  # where ONNX Runtime's int8 kernels are vectorised
VECTOR = ("avx512f", "avx2", "sse4_2")


@lru_cache(maxsize=1)
def cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags; empty where the file is not there."""
    try:
        text = path.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def int8_pays(flags: frozenset[str] | None = None) -> bool:
    """Whether int8 matrix products run faster than float ones on this CPU."""
    have = cpu_flags() if flags is None else flags
    return any(flag in have for flag in INT8_VECTOR)


def cpu_summary(flags: frozenset[str] | None = None) -> str:
    """``avx2, no int8 dot product`` / ``avx512f, amx_int8``: what the choice rests on."""
    have = cpu_flags() if flags is None else flags
    vector = next((f for f in VECTOR if f in have), "no avx")
    dot = next((f for f in INT8_DOT if f in have), "no int8 dot product")
    return f"{vector}, {dot}"
