"""Chunked model files: joined in order, checked against their digest before anything opens
them, verified once (a marker skips the hash after), joined once when processes race."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from pathlib import Path

import pytest

from backends import model_files
from backends.errors import EngineUnavailable
from backends.model_files import part_paths, prepare_model
from backends.options import LlamaCppOptions

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 3000, b"tail-of-the-model"]
WHOLE = b"".join(CHUNKS)
DIGEST = hashlib.sha256(WHOLE).hexdigest()


def write_parts(folder: Path, chunks: list[bytes] = CHUNKS) -> list[str]:
    folder.mkdir(exist_ok=True)
    for number, chunk in enumerate(chunks, 1):
        (folder / f"part{number:02d}.bin").write_bytes(chunk)
    return part_paths(str(folder / "part{i:02d}.bin"), len(chunks))


def test_parts_are_joined_in_order_into_the_cache_under_their_digest(tmp_path: Path) -> None:
    parts = write_parts(tmp_path / "parts")
    assert parts[1].endswith("part02.bin")
    path = Path(prepare_model(parts=parts, sha256=DIGEST.upper(), cache=tmp_path / "cache"))
    assert path == tmp_path / "cache" / f"{DIGEST}.gguf"
    assert path.read_bytes() == WHOLE
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [f"{DIGEST}.gguf", f"{DIGEST}.gguf.verified", f"{DIGEST}.lock"]
    )


def test_a_digest_mismatch_is_a_startup_error_naming_the_file(tmp_path: Path) -> None:
    parts = write_parts(tmp_path / "parts", [CHUNKS[0], CHUNKS[2], CHUNKS[1]])  # out of order
    cache = tmp_path / "cache"
    with pytest.raises(EngineUnavailable) as info:
        prepare_model(parts=parts, sha256=DIGEST, cache=cache)
    message = str(info.value)
    assert str(cache / f"{DIGEST}.gguf") in message and DIGEST in message
    assert "not loaded" in message
    assert not list(cache.glob("*.gguf*"))  # nothing a later start could mistake for the model


def test_a_single_file_with_a_wrong_digest_is_refused_by_name(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(WHOLE + b"!")
    with pytest.raises(EngineUnavailable, match=str(model)):
        prepare_model(model_path=str(model), sha256=DIGEST, cache=tmp_path / "cache")
    model.write_bytes(WHOLE)
    assert prepare_model(model_path=str(model), sha256=DIGEST, cache=tmp_path / "cache") == str(
        model
    )


def test_a_verified_file_is_not_hashed_again_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = write_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    path = Path(prepare_model(parts=parts, sha256=DIGEST, cache=cache))
    hashed: list[Path] = []
    real_digest = model_files._digest

    def counting(file: Path) -> str:
        hashed.append(file)
        return real_digest(file)

    monkeypatch.setattr(model_files, "_digest", counting)
    assert prepare_model(parts=parts, sha256=DIGEST, cache=cache) == str(path)
    assert hashed == []  # the marker matched: no second hash of the whole file
    # The same size, other bytes, a new mtime: hashed, found wrong, joined again.
    path.write_bytes(WHOLE[::-1])
    os.utime(path, ns=(1, 1))
    assert prepare_model(parts=parts, sha256=DIGEST, cache=cache) == str(path)
    assert hashed == [path] and path.read_bytes() == WHOLE


def _join_in_child(parts: list[str], cache: str, start: object) -> tuple[int, int]:
    start.wait()  # type: ignore[attr-defined]
    path = prepare_model(parts=parts, sha256=DIGEST, cache=Path(cache))
    stat = os.stat(path)
    return stat.st_ino, stat.st_mtime_ns


def test_two_processes_starting_at_once_join_the_file_once(tmp_path: Path) -> None:
    parts = write_parts(tmp_path / "parts")
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Barrier(3)
        with context.Pool(3) as pool:
            waiting = [
                pool.apply_async(_join_in_child, (parts, str(cache), start)) for _ in range(3)
            ]
            seen = {result.get(timeout=60) for result in waiting}
    path = cache / f"{DIGEST}.gguf"
    final = path.stat()
    assert seen == {(final.st_ino, final.st_mtime_ns)}  # one file, written once
    assert path.read_bytes() == WHOLE
    assert not list(cache.glob("*.partial"))


def test_a_missing_part_is_named(tmp_path: Path) -> None:
    parts = write_parts(tmp_path / "parts")
    os.remove(parts[1])
    with pytest.raises(EngineUnavailable, match=r"part02\.bin"):
        prepare_model(parts=parts, sha256=DIGEST, cache=tmp_path / "cache")


def test_the_options_take_one_file_or_parts_with_a_count_and_digest() -> None:
    LlamaCppOptions(model_path="m.gguf")
    LlamaCppOptions(model_parts="pkg:p{i}/data/part{i:02d}.bin", part_count=6, sha256=DIGEST)
    for wrong in (
        {},
        {"model_path": "m.gguf", "model_parts": "p{i}", "part_count": 2, "sha256": DIGEST},
        {"model_parts": "p{i}", "part_count": 2},  # no digest: never joined unchecked
        {"model_parts": "p.bin", "part_count": 2, "sha256": DIGEST},  # no {i}
        {"model_path": "m.gguf", "part_count": 2},
        {"model_path": "m.gguf", "sha256": "abc"},
    ):
        with pytest.raises(ValueError):
            LlamaCppOptions(**wrong)


def test_the_cache_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERGATE_MODEL_CACHE", "/somewhere/models")
    assert model_files.cache_dir() == Path("/somewhere/models")
    monkeypatch.delenv("TIERGATE_MODEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert model_files.cache_dir() == Path("/xdg/tiergate/models")
