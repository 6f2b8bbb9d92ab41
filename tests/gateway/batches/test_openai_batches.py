"""OpenAI's Files and Batches APIs with the official ``openai`` SDK, unchanged, against a
real gateway (uvicorn) on a real Redis and the fake engines: every line through the
serving core at batch priority and batch prices, bad input as error lines or as errors
that leave nothing behind, a budget that pays for 30 of 100 lines, cancellation, the
admin API and the metrics."""

from __future__ import annotations

import hashlib
import io
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.app import FORMATS
from gateway.batches.lines import answer
from gateway.batches.protocol import EMBEDDINGS_ENDPOINT, MESSAGES_ENDPOINT, OPENAI_ENDPOINTS
from gateway.chat import endpoints as chat
from gateway.edge.family import formats_by_path
from gateway.messages import endpoints as messages
from policies.stores.budget import tenant_scope
from policies.stores.spending import tenant_scopes
from tests.gateway.batches.support import (
    ADMIN_KEY,
    LINE_COST,
    THRIFTY_KEY,
    batch_config,
    chat_line,
    jsonl,
    run_batch,
    upload,
    wait_ended,
)
from tests.gateway.budget_support import REDIS_URL, BudgetProbe, redis_prefix
from tiergate_testing.configs import OTHER_KEY, TEST_KEY
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.upstream import running_upstream

REMOTE = "text-embedding-3-small"
PATIENT_KEY = "tg-patient-key-0123456789"
AUTO = [{"role": "user", "content": "route me"}]


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[RunningGateway, str]]:
    with running_upstream() as upstream, redis_prefix() as prefix:
        config = batch_config(token_delay_s=0.004)
        config["redis_url"], config["redis_prefix"] = REDIS_URL, prefix
        config["batches"].update(concurrency=8, store_max_bytes=64 * 1024)
        config["batches"]["tenants"] = {"globex": {"file_bytes": 3000, "lines_per_batch": 5}}
        config["engines"]["remote-embed"] = {
            "backend": "openai",
            "model": REMOTE,
            "options": {"api_base": upstream.base_url, "upstream_model": "upstream-embed"},
        }
        config["embeddings"] = {REMOTE: {"engine": "remote-embed"}}
        config["prices"][REMOTE] = {"input": 0.37, "output": 0}
        config["tenants"]["acme"]["cache"] = {"max_temperature": 0.0}
        config["tenants"]["patient"] = {
            "keys": [
                {"id": "patient-1", "sha256": hashlib.sha256(PATIENT_KEY.encode()).hexdigest()}
            ],
            "budget": {"limit_usd": 10 * LINE_COST, "window": "total"},
        }
        config["cache"] = {"key_prefix": f"{prefix}:cache"}
        with running_gateway(config) as running:
            yield running, prefix


def client_for(gateway: RunningGateway, key: str = TEST_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, max_retries=0)


def batch_events(prefix: str, tenant: str) -> list[Any]:
    return [e for e in BudgetProbe(prefix).events() if e.tenant == tenant and e.batch]


def test_a_200_line_batch_with_bad_lines_answers_each_valid_id_once(
    gateway: tuple[RunningGateway, str],
) -> None:
    running, prefix = gateway
    client = client_for(running)
    lines = [chat_line(f"r{i}", f"question {i}") for i in range(198)]
    lines.insert(50, b'{"custom_id": "broken", "method": "POST", "url"')  # not JSON
    lines.insert(120, chat_line("r7", "the same id again"))
    before = len(batch_events(prefix, "acme"))
    batch = run_batch(client, lines)
    assert batch.status == "completed"
    assert (batch.request_counts.total, batch.request_counts.completed) == (200, 198)
    assert batch.request_counts.failed == 2
    output = jsonl(client, batch.output_file_id)
    ids = Counter(line["custom_id"] for line in output)
    assert ids == Counter({f"r{i}": 1 for i in range(198)})  # each valid id exactly once
    assert {line["response"]["status_code"] for line in output} == {200}
    assert {line["response"]["body"]["object"] for line in output} == {"chat.completion"}
    errors = {line["error"]["code"]: line for line in jsonl(client, batch.error_file_id)}
    assert set(errors) == {"invalid_json_line", "duplicate_custom_id"}
    assert errors["invalid_json_line"]["custom_id"] is None
    assert errors["invalid_json_line"]["error"]["message"].startswith("line 51:")
    assert errors["duplicate_custom_id"]["custom_id"] == "r7"
    assert batch.usage is not None and batch.usage.output_tokens == 198 * 8
    # The ledger: one event per answered line, marked batch, at half the price.
    events = batch_events(prefix, "acme")[before:]
    assert len(events) == 198
    assert {e.request_id for e in events} == {line["response"]["request_id"] for line in output}
    assert all(e.cost_usd == pytest.approx(LINE_COST) for e in events)
    assert all(e.saved_batch_usd == pytest.approx(LINE_COST) for e in events)
    # The admin API: the batch per tenant, its progress and money; the metrics.
    admin = httpx.get(
        running.base_url + "/admin/api/batches",
        params={"tenant": "acme"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    ).json()
    row = next(b for b in admin["tenants"][0]["batches"] if b["id"] == batch.id)
    assert (row["done"], row["total"], row["status"]) == (200, 200, "completed")
    assert row["cost_usd"] == pytest.approx(198 * LINE_COST, rel=1e-6)
    assert row["interactive_usd"] == pytest.approx(2 * row["cost_usd"], rel=1e-6)
    overview = httpx.get(
        running.base_url + "/admin/api/overview", headers={"authorization": f"Bearer {ADMIN_KEY}"}
    ).json()
    assert overview["totals"]["saved_batch_usd"] >= 198 * LINE_COST * 0.999
    metrics = httpx.get(running.base_url + "/metrics").text
    assert 'tiergate_batch_lines_total{result="completed"}' in metrics
    assert "tiergate_batch_lines_running " in metrics
    deadline = time.monotonic() + 5  # the queue's gauge is read once a second
    while "tiergate_batch_lines_queued 0.0" not in metrics:
        assert time.monotonic() < deadline, "the queue's gauge never came back to 0"
        time.sleep(0.2)
        metrics = httpx.get(running.base_url + "/metrics").text


def test_every_endpoint_runs_as_its_own_format(gateway: tuple[RunningGateway, str]) -> None:
    running, prefix = gateway
    client = client_for(running)
    completion = {"model": "small", "prompt": "say hi", "max_tokens": 8}
    text = run_batch(client, [_line("t", "/v1/completions", completion)], "/v1/completions")
    assert jsonl(client, text.output_file_id)[0]["response"]["body"]["object"] == "text_completion"
    asked = {"model": "small", "input": "say hi", "max_output_tokens": 16}
    responses = run_batch(client, [_line("r", "/v1/responses", asked)], "/v1/responses")
    body = jsonl(client, responses.output_file_id)[0]["response"]["body"]
    assert body["object"] == "response" and body["status"] == "completed"
    assert client.responses.retrieve(body["id"]).id == body["id"]  # kept, as the endpoint keeps it
    embedded = run_batch(
        client,
        [_line("e", "/v1/embeddings", {"model": REMOTE, "input": "hello"})],
        "/v1/embeddings",
    )
    vectors = jsonl(client, embedded.output_file_id)[0]["response"]["body"]
    assert vectors["object"] == "list" and len(vectors["data"][0]["embedding"]) > 0
    assert any(e.tier == "embeddings" for e in batch_events(prefix, "acme"))
    # A body the endpoint refuses is its 400, in the error file; another endpoint's line
    # is refused without running.
    bad = run_batch(
        client,
        [
            _line("empty", "/v1/chat/completions", {"model": "small", "messages": []}),
            chat_line("elsewhere", "hi", url="/v1/completions"),
            _line("fine", "/v1/chat/completions", {"model": "auto", "messages": AUTO}),
        ],
    )
    assert bad.request_counts.completed == 1 and bad.request_counts.failed == 2
    failures = {line["custom_id"]: line for line in jsonl(client, bad.error_file_id)}
    assert failures["empty"]["response"]["status_code"] == 400
    assert failures["empty"]["response"]["body"]["error"]["param"] == "messages"
    assert failures["elsewhere"]["error"]["code"] == "mismatched_endpoint"
    fine = jsonl(client, bad.output_file_id)[0]["response"]
    auto = next(e for e in batch_events(prefix, "acme") if e.request_id == fine["request_id"])
    assert auto.tier == "small"  # ``auto`` without a classifier: the tenant's default tier


def test_each_path_a_batch_may_name_has_the_format_its_family_declares() -> None:
    """The batch runner looks a line's format up in what the families declare (no second
    map): every generation path a batch may name is there, embeddings run on their own."""
    batchable = {*OPENAI_ENDPOINTS, MESSAGES_ENDPOINT} - {EMBEDDINGS_ENDPOINT}
    assert set(FORMATS) == batchable
    assert FORMATS["/v1/chat/completions"] is chat.FAMILY.formats[chat.PATH]
    assert FORMATS["/v1/messages"] is messages.FAMILY.formats[messages.PATH]
    with pytest.raises(ValueError, match="two families declare /v1/chat/completions"):
        formats_by_path((chat.FAMILY, chat.FAMILY))


def test_identical_lines_hit_the_cache(gateway: tuple[RunningGateway, str]) -> None:
    running, prefix = gateway
    client = client_for(running)
    cached = {
        "model": "small",
        "max_tokens": 8,
        "temperature": 0,
        "messages": [{"role": "user", "content": "a question worth caching"}],
    }
    first = run_batch(client, [_line("a", "/v1/chat/completions", cached)])
    second = run_batch(client, [_line("b", "/v1/chat/completions", cached)])
    answers = [jsonl(client, b.output_file_id)[0]["response"] for b in (first, second)]
    assert answers[0]["body"]["choices"] == answers[1]["body"]["choices"]
    events = {e.request_id: e for e in batch_events(prefix, "acme")}
    assert events[answers[0]["request_id"]].cache == "miss"
    assert events[answers[1]["request_id"]].cache == "exact"


def test_a_budget_for_30_of_100_lines_answers_at_most_30(
    gateway: tuple[RunningGateway, str],
) -> None:
    running, prefix = gateway
    client = client_for(running, THRIFTY_KEY)
    batch = run_batch(client, [chat_line(f"t{i}", f"thrift {i}") for i in range(100)])
    assert batch.status == "completed"
    answered = jsonl(client, batch.output_file_id)
    refused = jsonl(client, batch.error_file_id)
    assert len(answered) <= 30 and len(answered) + len(refused) == 100
    assert len(answered) == 30  # the worst case is the cost here: nothing is wasted
    assert {r["response"]["status_code"] for r in refused} == {429}
    assert {r["response"]["body"]["error"]["code"] for r in refused} == {"insufficient_quota"}
    probe = BudgetProbe(prefix)
    config = running.state.config
    scope = tenant_scope("thrifty")
    status = probe.status(tenant_scopes(config, "thrifty"))[scope]
    assert status.limit_usd is not None
    assert status.spent_usd <= status.limit_usd + 1e-12
    assert probe.wait_no_holds() == 0  # nothing held afterwards


def test_a_line_is_refused_for_budget_only_when_settling_the_holds_cannot_pay_it(
    gateway: tuple[RunningGateway, str],
) -> None:
    """40 lines whose worst case (40 tokens) is 5 times what they cost (8), 8 at once, on a
    budget of 10 lines' cost: a line refused while others' holds fill the budget waits for
    them to settle, so lines are answered while the budget minus its spend pays a worst
    case (spent 0 to 5 of 10: exactly 6 lines); the other 34 are ``insufficient_quota``
    once it cannot. Before, a refusal was final however many holds were open: 4 answered."""
    running, prefix = gateway
    client = client_for(running, PATIENT_KEY)
    body = {"model": "small", "max_tokens": 40}
    lines = [
        _line(
            f"p{i}",
            "/v1/chat/completions",
            {**body, "messages": [{"role": "user", "content": f"p {i}"}]},
        )
        for i in range(40)
    ]
    batch = run_batch(client, lines)
    assert batch.status == "completed"
    answered, refused = jsonl(client, batch.output_file_id), jsonl(client, batch.error_file_id)
    assert (len(answered), len(refused)) == (6, 34)
    assert {r["response"]["body"]["error"]["code"] for r in refused} == {"insufficient_quota"}
    probe = BudgetProbe(prefix)
    assert probe.wait_no_holds() == 0
    status = probe.status(tenant_scopes(running.state.config, "patient"))[tenant_scope("patient")]
    assert status.spent_usd == pytest.approx(6 * LINE_COST)
    assert status.limit_usd is not None and status.spent_usd <= status.limit_usd + 1e-12


def test_cancel_ends_the_queued_lines_and_keeps_the_answered(
    gateway: tuple[RunningGateway, str],
) -> None:
    running, _ = gateway
    client = client_for(running)
    file_id = upload(client, [chat_line(f"c{i}", f"cancel me {i}") for i in range(400)])
    batch = client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    ended = wait_ended(client, batch.id)
    assert ended.status == "cancelled" and ended.cancelled_at is not None
    answered = jsonl(client, ended.output_file_id)
    cancelled = jsonl(client, ended.error_file_id)
    assert len(answered) == ended.request_counts.completed
    assert len(answered) + len(cancelled) == 400
    assert cancelled and {c["error"]["code"] for c in cancelled} == {"batch_cancelled"}
    ids = Counter(line["custom_id"] for line in [*answered, *cancelled])
    assert ids == Counter({f"c{i}": 1 for i in range(400)})


def test_bad_input_is_refused_and_leaves_nothing_behind(
    gateway: tuple[RunningGateway, str],
) -> None:
    running, _ = gateway
    acme, globex = client_for(running), client_for(running, OTHER_KEY)
    before = {f.id for f in acme.files.list()}
    with pytest.raises(openai.APIStatusError) as large:
        upload(acme, [b"x" * 70_000])
    assert large.value.status_code == 413
    assert {f.id for f in acme.files.list()} == before
    # globex may keep 3,000 bytes of files: the second file is refused, the first kept.
    kept = upload(globex, [chat_line("g", "x" * 1200)])
    with pytest.raises(openai.BadRequestError) as full:
        upload(globex, [chat_line("h", "y" * 1800)])
    assert full.value.code == "storage_limit_exceeded"
    assert [f.id for f in globex.files.list()] == [kept]
    # A batch on another tenant's file is a 404, and no batch is made.
    mine = upload(acme, [chat_line("a", "hi")])
    with pytest.raises(openai.NotFoundError):
        globex.batches.create(
            input_file_id=mine, endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(openai.NotFoundError):
        globex.files.retrieve(mine)
    assert list(globex.batches.list()) == []
    with pytest.raises(openai.BadRequestError):  # an endpoint batches do not serve
        acme.batches.create(input_file_id=mine, endpoint="/v1/moderations", completion_window="24h")
    # More lines than globex's batches may have: refused whole.
    globex.files.delete(kept)
    six = upload(globex, [chat_line(f"m{i}", "x") for i in range(6)])
    with pytest.raises(openai.BadRequestError) as too_many:
        globex.batches.create(
            input_file_id=six, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert too_many.value.code == "too_many_lines"
    assert list(globex.batches.list()) == []
    with pytest.raises(openai.BadRequestError):
        upload(acme, [b"   "])  # empty
    deleted = acme.files.delete(mine)
    assert deleted.deleted and deleted.id == mine
    with pytest.raises(openai.NotFoundError):
        acme.files.content(mine)


def test_lists_page_newest_first(gateway: tuple[RunningGateway, str]) -> None:
    running, _ = gateway
    client = client_for(running)
    ids = [upload(client, [chat_line(f"p{i}", "hi")]) for i in range(3)]
    page = client.files.list(limit=2)
    assert [f.id for f in page.data] == ids[::-1][:2] and page.has_more
    rest = client.files.list(limit=2, after=page.data[-1].id)
    assert rest.data[0].id == ids[0]
    batches = client.batches.list(limit=1)
    assert len(batches.data) == 1 and batches.has_more


def _line(custom_id: str, url: str, body: dict[str, Any]) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def test_upload_takes_expiry_and_refuses_other_purposes(
    gateway: tuple[RunningGateway, str],
) -> None:
    running, _ = gateway
    client = client_for(running)
    data = io.BytesIO(chat_line("x", "hi"))
    kept = client.files.create(
        file=("in.jsonl", data),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert kept.expires_at == kept.created_at + 3600
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("in.jsonl", io.BytesIO(b"x")), purpose="assistants")


def test_a_line_run_twice_is_charged_once(gateway: tuple[RunningGateway, str]) -> None:
    """A replica that died after settling a line but before writing its result leaves the
    line to another, which runs it again: under the same request id, charged once."""
    running, prefix = gateway
    state = running.state
    principal = running.call(state.keys.authenticate(TEST_KEY))
    body = orjson.dumps(
        {"model": "small", "max_tokens": 8, "messages": [{"role": "user", "content": "twice"}]}
    )
    seed = "acme/batch_twice/0"
    first = running.call(answer(state.core, FORMATS, principal, "/v1/chat/completions", body, seed))
    second = running.call(
        answer(state.core, FORMATS, principal, "/v1/chat/completions", body, seed)
    )
    assert first.request_id == second.request_id
    events = [e for e in BudgetProbe(prefix).events() if e.request_id == first.request_id]
    assert len(events) == 1 and events[0].batch
    assert BudgetProbe(prefix).wait_no_holds() == 0


def test_an_embeddings_line_costs_what_its_outcome_says(
    gateway: tuple[RunningGateway, str],
) -> None:
    """An embeddings line's money is its run's ``Outcome``, exact (at 0.37/M input
    tokens a token costs more decimals than a header's 8): the line's cost, saving and
    tokens are the ledger event's."""
    running, prefix = gateway
    state = running.state
    principal = running.call(state.keys.authenticate(TEST_KEY))
    body = orjson.dumps({"model": REMOTE, "input": ["count these words", "and these"]})
    line = answer(state.core, FORMATS, principal, EMBEDDINGS_ENDPOINT, body, "acme/batch_embed/0")
    answered = running.call(line)
    money = answered.money
    (event,) = [e for e in BudgetProbe(prefix).events() if e.request_id == answered.request_id]
    assert event.batch and event.tier == "embeddings" and money.prompt_tokens > 0
    assert money.prompt_tokens == answered.body["usage"]["prompt_tokens"]
    assert money.cost_usd == event.cost_usd == money.prompt_tokens * 0.37e-6 * 0.5
    assert money.saved_usd == event.saved_batch_usd == pytest.approx(money.cost_usd)


def _nested_line(custom_id: str, levels: int) -> bytes:
    """A chat line whose body holds a value ``levels`` deep (written by hand: orjson writes
    at most 254 levels)."""
    deep = b'{"a":' * (levels - 2) + b"1" + b"}" * (levels - 2)  # the 1 is ``levels`` deep
    body = b'{"model":"small","max_tokens":8,"messages":[{"role":"user","content":"hi"}],'
    return (
        b'{"custom_id":"' + custom_id.encode() + b'","method":"POST",'
        b'"url":"/v1/chat/completions","body":' + body + b'"metadata":' + deep + b"}}"
    )


def test_a_line_nested_too_deep_is_an_error_line_not_a_500(
    gateway: tuple[RunningGateway, str],
) -> None:
    """300 levels (orjson writes 254) and 65 (the endpoints take 64): each its own
    ``invalid_body`` error line; the batch is made and its other lines run."""
    running, _ = gateway
    client = client_for(running)
    lines = [_nested_line("deep300", 300), _nested_line("deep65", 65), chat_line("ok", "hi")]
    batch = run_batch(client, lines)
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 2)
    assert [line["custom_id"] for line in jsonl(client, batch.output_file_id)] == ["ok"]
    errors = {line["custom_id"]: line["error"] for line in jsonl(client, batch.error_file_id)}
    assert {e["code"] for e in errors.values()} == {"invalid_body"}
    assert errors["deep300"]["message"].startswith("line 1: body nests deeper than 64 levels")
    assert errors["deep65"]["message"].startswith("line 2: body nests deeper than 64 levels")
