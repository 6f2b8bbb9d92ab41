"""Config validation: every problem with file, line and field; the shipped files pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from policies.loader import ConfigError, load_config, parse_config
from tests.support import PYTHON, REPO
from tiergate_testing.gateways import subprocess_env

SHIPPED = [REPO / "config" / "gateway.yaml", *sorted((REPO / "config" / "examples").glob("*.yaml"))]

BAD = """\
engines:
  a:
    backend: fake
    model: m
    replicas: 0
tiers:
  small:
    engines: [a]
    fallback: nowhere
prices:
  m: {input: -1, output: 1}
routing:
  thresholds: [0.8, 0.2]
  colour: blue
"""


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    config = load_config(path)
    tiers = ["small"] if path.name == "small-only.yaml" else ["small", "medium", "large"]
    assert list(config.tiers)[:3] == tiers


def test_problems_name_file_line_and_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(BAD, "bad.yaml")
    found = {(p.field, p.line) for p in info.value.problems}
    assert ("engines.a.replicas", 5) in found
    assert ("prices.m.input", 11) in found
    assert ("routing.colour", 14) in found
    assert all(p.file == "bad.yaml" for p in info.value.problems)


def test_cross_references_are_checked() -> None:
    text = BAD.replace("replicas: 0", "replicas: 1").replace("input: -1", "input: 1")
    text = text.replace("  colour: blue\n", "").replace("[0.8, 0.2]", "[0.2, 0.8]")
    with pytest.raises(ConfigError) as info:
        parse_config(text, "refs.yaml")
    assert "falls back to unknown tier 'nowhere'" in str(info.value)


def test_invalid_yaml_has_a_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("engines:\n  a: [\n", "broken.yaml")
    assert info.value.problems[0].line is not None


def test_check_config_cli(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    run = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(bad)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 1
    assert f"{bad}:5: engines.a.replicas:" in run.stderr
    good = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", *map(str, SHIPPED)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=REPO,
        check=False,
    )
    assert good.returncode == 0, good.stderr
    assert good.stdout.count(": ok (") == len(SHIPPED)


def test_env_references_expand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_URL", "redis://example:1/2")
    text = "redis_url: ${TG_TEST_URL}\n" + BAD.split("routing:")[0].replace(
        "replicas: 0", "replicas: 1"
    ).replace("input: -1", "input: 1").replace("    fallback: nowhere\n", "")
    assert parse_config(text).redis_url == "redis://example:1/2"


TENANTS = """\
engines:
  a: {backend: fake, model: m}
tiers:
  small: {engines: [a]}
prices:
  m: {input: 1, output: 1}
tenants:
"""
DIGEST = "ab" * 32


@pytest.mark.parametrize(
    ("name", "key_id"),
    [("a:b", "k1"), ("acme", "k:1"), ("ac me", "k1"), ("acme", "k\t1"), ("acme", "k|1"), ("", "k")],
)
def test_tenant_and_key_names_cannot_spell_another_scope(name: str, key_id: str) -> None:
    text = TENANTS + f'  "{name}":\n    keys:\n      - {{id: "{key_id}", sha256: {DIGEST}}}\n'
    with pytest.raises(ConfigError) as info:
        parse_config(text, "names.yaml")
    problem = info.value.problems[0]  # (pydantic adds "keys: at least 1 item" for a bad id)
    assert "pattern" in problem.message and problem.field.startswith("tenants.")
    assert problem.line == (10 if name == "acme" else 8)


def test_two_keys_with_one_digest_are_a_config_error(tmp_path: Path) -> None:
    text = TENANTS + (
        "  acme:\n"
        "    keys:\n"
        f"      - {{id: k1, sha256: {DIGEST}}}\n"
        "      - {id: k1, from_env: ACME_KEY}\n"
        "  globex:\n"
        "    keys:\n"
        f"      - {{id: g1, sha256: {DIGEST}}}\n"
        "      - {id: g2, from_env: ACME_KEY}\n"
    )
    path = tmp_path / "dupes.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    found = {(p.field, p.line): p.message for p in info.value.problems}
    assert set(found) == {
        ("tenants.acme.keys.1.id", 11),
        ("tenants.globex.keys.0.sha256", 14),
        ("tenants.globex.keys.1.from_env", 15),
    }
    assert "tenant 'acme' key 'k1'" in found[("tenants.globex.keys.0.sha256", 14)]
    result = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(path)],
        capture_output=True, text=True, env=subprocess_env(), timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"{path}:14: tenants.globex.keys.0.sha256: the same key as" in result.stderr


def test_two_environment_keys_with_one_value_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from policies.tenants import KeyRing

    monkeypatch.setenv("FIRST_KEY", "tg-same-value-0123456789")
    monkeypatch.setenv("SECOND_KEY", "tg-same-value-0123456789")
    text = TENANTS + (
        "  acme:\n    keys: [{id: k1, from_env: FIRST_KEY}]\n"
        "  globex:\n    keys: [{id: g1, from_env: SECOND_KEY}]\n"
    )
    with pytest.raises(ValueError, match="tenant 'globex' key 'g1' is the same key as tenant"):
        KeyRing.from_config(parse_config(text))


VERIFY = """\
engines:
  a: {backend: fake, model: m}
tiers:
  small: {engines: [a]}
prices:
  m: {input: 1, output: 1}
tenants:
  acme:
    keys: [{id: k, sha256: "%s"}]
    cache:
      semantic_verify: %s
"""


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ("{max_wrong_rate: 0}", "semantic_verify.target.max_wrong_rate", "greater than 0"),
        ("{max_wrong_rate: 0.5}", "semantic_verify.target.max_wrong_rate", "less than or equal"),
        ("{max_wrong_rate: 0.01, mode: x}", "semantic_verify.target.mode", "Extra inputs"),
        ("loose", "semantic_verify.mode", "'strict' or 'guard'"),
    ],
)
def test_semantic_verify_is_a_mode_or_an_error_bound(value: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(VERIFY % ("0" * 64, value), "verify.yaml")
    (problem,) = info.value.problems
    assert (problem.file, problem.line) == ("verify.yaml", 11)
    assert problem.field == f"tenants.acme.cache.{field}" and message in problem.message


def test_semantic_verify_accepts_a_target() -> None:
    config = parse_config(VERIFY % ("0" * 64, "{max_wrong_rate: 0.001}"), "ok.yaml")
    target = config.tenants["acme"].cache.semantic_verify
    assert not isinstance(target, str) and target.max_wrong_rate == 0.001
    assert parse_config(VERIFY % ("0" * 64, "strict")).tenants["acme"].cache.semantic_verify == (
        "strict"
    )
