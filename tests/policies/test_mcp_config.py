"""The ``mcp:`` section and the tenants' MCP fields: each problem with its file, line and
field, the references between them checked, ``check-config`` naming unset credentials."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from policies.loader import ConfigError, parse_config
from tests.support import PYTHON, REPO
from tiergate_testing.gateways import subprocess_env

BASE = """\
engines:
  a: {backend: fake, model: m}
tiers:
  small: {engines: [a]}
prices:
  m: {input: 1, output: 1}
tenants:
  acme:
    keys: [{id: acme-1, from_env: ACME_KEY}]
    mcp_tools: [calc.add, "search.*"]
    mcp_rate_limit: {calls_per_minute: 30}
    mcp_log_arguments: true
mcp:
  timeout_s: 5
  servers:
    calc:
      command: [python, -m, calc]
      price_usd: 0.01
      tool_prices: {add: 0.02}
    search:
      url: http://127.0.0.1:9/mcp
      credential: {from_env: SEARCH_TOKEN}
      tenant_credentials:
        acme: {from_env: ACME_SEARCH_TOKEN, header: X-Api-Key, prefix: ""}
      key_credentials:
        acme/acme-1: {from_env: ACME_ONE_TOKEN}
"""


def problems(text: str) -> set[tuple[str, int | None, str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "mcp.yaml")
    return {(p.field, p.line, p.message) for p in info.value.problems}


def test_a_valid_section() -> None:
    config = parse_config(BASE, "mcp.yaml")
    calc, search = config.mcp.servers["calc"], config.mcp.servers["search"]
    assert calc.price_of("add") == 0.02 and calc.price_of("sub") == 0.01
    assert config.tenants["acme"].mcp_tools == ("calc.add", "search.*")
    # The most specific credential wins: the key's, the tenant's, the server's.
    assert search.credential_for("acme", "acme-1")[0] == "key:acme/acme-1"
    assert search.credential_for("acme", "other")[0] == "tenant:acme"
    assert search.credential_for("globex", "g-1") == ("server", search.credential)


def test_one_way_in_and_a_command_credential_needs_its_variable() -> None:
    both = BASE.replace("      price_usd: 0.01\n", "      url: http://x/mcp\n")
    assert any(f == "mcp.servers.calc" and line == 16 for f, line, _ in problems(both))
    no_env = BASE.replace("      price_usd: 0.01\n", "      credential: {from_env: CALC_TOKEN}\n")
    assert any("need env" in message for _, _, message in problems(no_env))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("    calc:\n", "    calc.v2:\n"), "mcp.servers.calc.v2"),
        (("[calc.add,", "[calc add,"), "tenants.acme.mcp_tools.0"),
        (("calls_per_minute: 30", "calls_per_minute: 0"), "tenants.acme.mcp_rate_limit"),
        (("timeout_s: 5", "timeout_s: 0"), "mcp.timeout_s"),
        (("from_env: SEARCH_TOKEN", "from_env: SEARCH-TOKEN"), "mcp.servers.search.credential"),
    ],
)
def test_a_bad_field_is_named_with_its_line(change: tuple[str, str], field: str) -> None:
    found = problems(BASE.replace(*change))
    assert any(f.startswith(field) and line is not None for f, line, _ in found), found


def test_references_between_tenants_and_servers() -> None:
    unknown_server = BASE.replace("[calc.add,", "[calculator.add,")
    assert any("'calculator.add' names no server" in m for _, _, m in problems(unknown_server))
    unknown_key = BASE.replace("acme/acme-1:", "acme/acme-9:")
    assert any("'acme/acme-9' names no key" in m for _, _, m in problems(unknown_key))
    # An API-managed key (key_…) or a runtime tenant is not in the file: allowed.
    parse_config(BASE.replace("acme/acme-1:", "acme/key_0123abcd:"), "mcp.yaml")
    parse_config(BASE.replace("        acme: {from_env", "        initech: {from_env"), "mcp.yaml")


def test_check_config_notes_unset_credentials(tmp_path: Path) -> None:
    path = tmp_path / "mcp.yaml"
    path.write_text(BASE)
    env = subprocess_env(SEARCH_TOKEN="set")
    env.pop("ACME_SEARCH_TOKEN", None)
    run = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "mcp.servers.search.tenant_credentials.acme: $ACME_SEARCH_TOKEN is not set" in (
        run.stdout
    )
    assert "$SEARCH_TOKEN" not in run.stdout
