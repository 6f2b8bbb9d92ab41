"""A separate virtual environment per benched peer (LiteLLM, Envoy, server candidates)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


def ensure_venv(
    venv: Path, dist: str, version: str, specs: list[str], log: Path, *, inherit: bool = False
) -> Path:
    """``venv`` with ``specs`` installed, its ``dist`` at ``version``; rebuilt when missing
    or wrong. Returns its Python. (Each benched peer gets an environment of its own, so
    none of its pins touch tiergate's.) ``inherit``: the environment also sees this
    interpreter's packages (a ``.pth`` after its own) and ``specs`` go in with no
    dependencies: a server or loop to run tiergate's own code under, nothing else."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"]
    if python.exists():
        found = subprocess.run(probe, capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip() == version:
            return python
        shutil.rmtree(venv)
    print(f"creating {venv} with {' '.join(specs)} (pip's cache makes it quick)", flush=True)
    with log.open("wb") as sink:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        install = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        if inherit:
            own = subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            shared = sysconfig.get_path("purelib")  # and its own .pth files with it
            Path(own, "zz-inherit.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
            install.append("--no-deps")
        subprocess.run([*install, *specs], check=True, stdout=sink, stderr=subprocess.STDOUT)
    found = subprocess.run(probe, capture_output=True, text=True, check=True)
    if found.stdout.strip() != version:
        raise RuntimeError(f"{dist} {found.stdout.strip()} installed, expected {version}")
    return python
