"""LangChain's ``ChatOpenAI``, unchanged, against the embedded default (llama.cpp):
``bind_tools`` gets a schema-valid call, ``with_structured_output`` a Pydantic object."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tiergate_testing.configs import TEST_KEY, smollm2_config
from tiergate_testing.gateways import RunningGateway, running_gateway

pytestmark = pytest.mark.slow


class GetWeather(BaseModel):
    """The weather forecast for a city."""

    city: Literal["Paris", "London", "Tokyo"]
    days: int = Field(ge=1, le=7)


class Forecast(BaseModel):
    city: Literal["Paris", "London", "Tokyo"]
    sunny: bool


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with running_gateway(smollm2_config(replicas=1)) as running:
        yield running


def chat(gateway: RunningGateway):  # type: ignore[no-untyped-def]
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="small",
        base_url=gateway.base_url + "/v1",
        api_key=TEST_KEY,  # type: ignore[arg-type]
        max_retries=0,
        max_tokens=80,  # type: ignore[call-arg]
        temperature=0,
        seed=1,
    )


def test_bind_tools_returns_a_valid_tool_call(gateway: RunningGateway) -> None:
    model = chat(gateway).bind_tools([GetWeather], tool_choice="GetWeather")
    reply = model.invoke("What is the weather in Tokyo for 2 days?")
    assert len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    assert call["name"] == "GetWeather"
    GetWeather.model_validate(call["args"])  # schema-valid, by construction


def test_with_structured_output_returns_the_model(gateway: RunningGateway) -> None:
    model = chat(gateway).with_structured_output(Forecast)
    result = model.invoke("Is it sunny in Paris today?")
    assert isinstance(result, Forecast)
