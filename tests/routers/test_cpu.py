"""The CPU's feature flags and the int8-or-float choice made from them (routers/cpu.py)."""

from __future__ import annotations

from pathlib import Path

from routers.cpu import cpu_flags, cpu_summary, int8_pays

OLD = frozenset("fpu sse4_2 avx".split())
AVX2_VM = OLD | {"fma", "avx2", "f16c"}
SAPPHIRE_RAPIDS = AVX2_VM | {"avx512f", "avx512_vnni", "amx_int8", "amx_tile"}


def test_int8_where_its_kernels_are_vectorised() -> None:
    assert int8_pays(AVX2_VM)  # measured: 1.3-1.7x less CPU than fp32 (bench/perf/embed_cpu.py)
    assert int8_pays(SAPPHIRE_RAPIDS)
    assert int8_pays(OLD | {"avx_vnni"})
    assert not int8_pays(OLD)  # no AVX2: the float graph
    assert not int8_pays(frozenset())  # flags unknown (not x86 Linux)
    assert cpu_summary(AVX2_VM) == "avx2, no int8 dot product"
    assert cpu_summary(SAPPHIRE_RAPIDS) == "avx512f, amx_int8"


def test_flags_come_from_proc_cpuinfo_and_a_missing_file_means_none(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\n")
    assert cpu_flags(info) == frozenset({"fpu", "avx2", "fma"})
    assert cpu_flags(tmp_path / "absent") == frozenset()
    here = cpu_flags()  # this machine's: whatever it is, the summary names its vector unit
    assert cpu_summary(here).split(",")[0] in {"avx512f", "avx2", "sse4_2", "no avx"}
