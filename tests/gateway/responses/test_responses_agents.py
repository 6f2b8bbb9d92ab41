"""The OpenAI Agents SDK (``openai-agents``), unchanged, running an agent with one
function tool to completion against the gateway's ``/v1/responses`` on the fake engines
(scripted to call the tool when asked about the weather): the SDK calls the model, runs
the tool, sends its result back and ends with the model's answer. Its tracing exporter
is off (it would post to the provider)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from tiergate_testing.configs import TEST_KEY, fake_config
from tiergate_testing.gateways import RunningGateway, running_gateway
from tiergate_testing.recorder import Recorder, running_recorder

SCRIPT = [{"when": "weather", "call": "get_weather", "arguments": {"city": "Paris"}}]


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[RunningGateway, Recorder]]:
    set_tracing_disabled(True)
    with running_gateway(fake_config(tools=True, tool_script=SCRIPT)) as gateway:
        with running_recorder(gateway.base_url) as recorder:
            yield gateway, recorder


def forecaster(base_url: str, seen: list[str]) -> tuple[Agent, openai.AsyncOpenAI]:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather forecast for a city."""
        seen.append(city)
        return f"sunny in {city}"

    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=TEST_KEY, max_retries=0)
    model = OpenAIResponsesModel(model="small", openai_client=client)
    agent = Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather], model=model)
    return agent, client


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_agent_runs_its_tool_to_completion(
    proxied: tuple[RunningGateway, Recorder], streamed: bool
) -> None:
    _, recorder = proxied
    seen: list[str] = []
    agent, client = forecaster(recorder.base_url, seen)
    start = len(recorder.requests)
    try:
        question = f"What is the weather in Paris? ({'streamed' if streamed else 'whole'})"
        if streamed:
            run = Runner.run_streamed(agent, question)
            kinds = {event.type async for event in run.stream_events()}
            assert "raw_response_event" in kinds
            final = run.final_output
        else:
            final = (await Runner.run(agent, question)).final_output
    finally:
        await client.close()
    assert seen == ["Paris"]  # the SDK ran the tool the model called
    assert final.strip() == "The tool returned: sunny in Paris"
    calls = [r for r in recorder.requests[start:] if r.path == "/v1/responses"]
    assert len(calls) == 2 and all(c.status == 200 for c in calls)
    assert calls[0].body.get("stream", False) is streamed
    [output] = [i for i in calls[1].body["input"] if i.get("type") == "function_call_output"]
    assert output["output"] == "sunny in Paris"
