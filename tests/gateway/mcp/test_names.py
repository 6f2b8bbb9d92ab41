"""The gateway's names for upstream tools and resources, and who may use which."""

from __future__ import annotations

from gateway.mcp.names import Allowlist, resource_uri, split_name, split_uri, tool_name


def test_a_tool_is_named_after_its_server_and_splits_back() -> None:
    assert tool_name("calc", "add") == "calc.add"
    assert split_name("calc.add") == ("calc", "add")
    # A tool name may hold dots: the server is what comes before the first one.
    assert split_name("calc.v2.add") == ("calc", "v2.add")
    assert split_name("add") is None and split_name(".add") is None and split_name("calc.") is None


def test_a_resource_uri_gets_the_server_as_its_scheme_prefix() -> None:
    assert resource_uri("calc", "greeting://bob") == "calc+greeting://bob"
    assert split_uri("calc+greeting://bob") == ("calc", "greeting://bob")
    # a scheme of its own with a '+' (git+ssh) keeps it: only the first '+' splits
    assert split_uri("repo+git+ssh://host/x") == ("repo", "git+ssh://host/x")
    assert split_uri("greeting://bob") is None


def test_wildcards_and_the_empty_list() -> None:
    calc_all = Allowlist(("calc.*",))
    assert calc_all.allows("calc.add") and calc_all.allows("calc.v2.add")
    assert not calc_all.allows("search.query") and not calc_all.allows("calculator.add")
    assert not Allowlist(()).allows("calc.add")  # none by default
    assert Allowlist(("*",)).allows("search.query")
    assert Allowlist(("*.query",)).allows("search.query")
    assert not Allowlist(("Calc.*",)).allows("calc.add")  # case-sensitive


def test_a_key_only_narrows_its_tenant() -> None:
    both = Allowlist(("calc.*", "search.query"), ("calc.add", "search.*"))
    assert both.allows("calc.add") and both.allows("search.query")
    assert not both.allows("calc.sub")  # the key does not allow it
    assert not both.allows("search.other")  # the tenant does not
    assert not Allowlist(("calc.*",), ()).allows("calc.add")  # a key with none has none


def test_resources_need_the_whole_server() -> None:
    assert Allowlist(("calc.*",)).allows_server("calc")
    assert Allowlist(("*",)).allows_server("calc")
    assert not Allowlist(("calc.add",)).allows_server("calc")
    assert not Allowlist(("calc.*",), ("calc.add",)).allows_server("calc")


def test_which_upstreams_a_caller_may_reach() -> None:
    only_add = Allowlist(("calc.add",))
    assert only_add.may_reach("calc") and not only_add.may_reach("search")
    assert not only_add.may_reach("cal")  # a prefix of a server is another server
    assert Allowlist(("*.query",)).may_reach("search")
    assert Allowlist(("ca*",)).may_reach("calc")
    assert not Allowlist(("calc.*",), ("search.*",)).may_reach("calc")
    # Never a false "no": whatever a pattern allows is reachable.
    for pattern in ("calc*add", "c*", "calc.a*", "*"):
        assert Allowlist((pattern,)).allows("calc.add") <= Allowlist((pattern,)).may_reach("calc")
