"""Engine options are typed per backend: check-config names a wrong one with file:line,
without importing any engine library, and the models match the engines' arguments."""

from __future__ import annotations

import importlib
import inspect
import subprocess

import pytest

from backends.fake import FakeEngine
from backends.llamacpp import LlamaCppEngine
from backends.registry import BACKENDS, build_engine
from policies.loader import ConfigError, parse_config
from tests.support import PYTHON, REPO
from tiergate_testing.gateways import subprocess_env

TAIL = """\
tiers:
  small:
    engines: [a]
prices:
  m: {input: 1, output: 1}
"""


def engine(backend: str, options: str, extra: str = "") -> str:
    head = f"engines:\n  a:\n    backend: {backend}\n    model: m\n{extra}"
    return f"{head}    options:\n{options}{TAIL}"


def problems(text: str) -> set[tuple[str, int | None]]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "engine.yaml")
    return {(p.field, p.line) for p in info.value.problems}


def test_wrong_and_unknown_options_have_file_line_and_field() -> None:
    text = engine("llamacpp", "      model_path: x.gguf\n      n_ctx: lots\n      n_ctxx: 9\n")
    assert problems(text) == {("engines.a.options.n_ctx", 7), ("engines.a.options.n_ctxx", 8)}


def test_a_missing_model_is_named() -> None:
    text = engine("llamacpp", "      n_ctx: 512\n")
    assert problems(text) == {("engines.a.options", 5)}
    with pytest.raises(ConfigError, match="give model_path or model_parts"):
        parse_config(text, "engine.yaml")


def test_old_gateway_settings_under_options_get_a_clear_error() -> None:
    text = engine("fake", "      tokens: 4\n      max_inflight: 8\n")
    with pytest.raises(ConfigError) as info:
        parse_config(text, "old.yaml")
    (problem,) = info.value.problems
    assert (problem.field, problem.line) == ("engines.a.options", 5)
    assert "max_inflight moved out of options" in problem.message


def test_gateway_settings_live_on_the_engine_spec() -> None:
    extra = "    max_inflight: 8\n    default_max_tokens: 64\n"
    config = parse_config(engine("fake", "      tokens: 4\n", extra))
    spec = config.engines["a"]
    assert (spec.max_inflight, spec.default_max_tokens, spec.options) == (8, 64, {"tokens": 4})
    assert problems(engine("fake", "      tokens: 4\n", "    max_inflight: 0\n")) == {
        ("engines.a.max_inflight", 5)
    }


def test_unknown_backend_and_openai_without_api_base() -> None:
    assert ("engines.a.backend", 3) in problems(engine("vlm", "      seed: 1\n"))
    with pytest.raises(ConfigError, match=r"needs options\.api_base"):
        parse_config(engine("openai", "      timeout_s: 5\n"))


def test_check_config_imports_no_engine_library() -> None:
    vllm = engine("vllm", "      max_model_len: 4096\n")
    llama = engine("llamacpp", "      model_path: x.gguf\n")
    code = (
        "import sys\n"
        "from policies.loader import parse_config\n"
        f"parse_config({vllm!r})\n"
        f"parse_config({llama!r})\n"
        "heavy = {'vllm', 'llama_cpp', 'litellm', 'sglang', 'torch', 'aiohttp'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [PYTHON, "-c", code], cwd=REPO, env=subprocess_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def constructor_arguments(target: str) -> set[str]:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    parameters = inspect.signature(getattr(module, attr)).parameters
    named = {
        n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY and n not in ("name", "model")
    }
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        named |= set(module.PASSTHROUGH)  # vllm: AsyncEngineArgs by name
    return named


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_options_model_matches_the_engine(backend: str) -> None:
    spec = BACKENDS[backend]
    arguments = constructor_arguments(spec.target)
    declared = set(spec.options.model_fields)
    assert declared == arguments - {"default_max_tokens"}
    assert spec.options.takes_default_max_tokens == ("default_max_tokens" in arguments)


def test_build_engine_checks_options_and_passes_the_default_cap() -> None:
    with pytest.raises(ValueError, match="token_delay"):
        build_engine("fake", "a-0", "m", {"token_delay": 1})
    llama = build_engine("llamacpp", "b-0", "m", {"model_path": "x.gguf"}, 99)
    assert isinstance(llama, LlamaCppEngine) and llama.default_max_tokens == 99
    fake = build_engine("fake", "a-0", "m", {"tokens": 3}, 99)  # forwards no cap
    assert isinstance(fake, FakeEngine) and fake.tokens == 3
