"""A stand-in for ``sglang.srt.function_call.function_call_parser`` (SGLang needs CUDA).

Same surface as the real module, as the worker uses it: ``FunctionCallParser(tools,
tool_call_parser)`` with ``ToolCallParserEnum``, ``parse_stream_chunk`` and
``parse_non_stream`` returning ``(normal_text, [ToolCallItem])``, and the ``Tool`` model
it reads. It knows one format, hermes (``<tool_call>{"name": N, "arguments": A}</tool_call>``,
the one ``FakeSglangEngine`` writes), and streams like SGLang's detectors do: a call's first
item carries ``name`` and empty ``parameters``, later items carry argument fragments
(indexed by call position); ``parse_non_stream`` indexes by the tool's place in ``tools``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_HEADER = re.compile(r'\s*\{"name": "([^"]+)", "arguments": ')
_WHOLE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
_TAIL = len("}\n" + CLOSE)


class Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = "function"
    function: Function


class ToolCallItem(BaseModel):
    tool_index: int
    name: str | None = None
    parameters: str


class FunctionCallParser:
    ToolCallParserEnum: dict[str, str] = {"hermes": "HermesDetector"}

    def __init__(self, tools: list[Tool], tool_call_parser: str) -> None:
        if tool_call_parser not in self.ToolCallParserEnum:
            raise ValueError(f"Unsupported tool_call_parser: {tool_call_parser}")
        assert all(isinstance(t, Tool) for t in tools)  # the worker converts them
        self.tools = tools
        self.buffer = ""
        self.in_call = False
        self.call = -1
        self.args_from: int | None = None
        self.sent = 0

    def parse_non_stream(self, text: str) -> tuple[str, list[ToolCallItem]]:
        names = [t.function.name for t in self.tools]
        items = []
        for match in _WHOLE.finditer(text):
            call = json.loads(match.group(1))
            index = names.index(call["name"]) if call["name"] in names else -1
            items.append(ToolCallItem(tool_index=index, name=call["name"], parameters=""))
            items[-1].parameters = json.dumps(call["arguments"], ensure_ascii=False)
        return _WHOLE.sub("", text).strip(), items

    def parse_stream_chunk(self, delta: str) -> tuple[str, list[ToolCallItem]]:
        self.buffer += delta
        normal, items = "", []
        while True:
            if not self.in_call:
                at = self.buffer.find(OPEN)
                if at < 0:
                    keep = _partial_suffix(self.buffer, OPEN)
                    normal += self.buffer[: len(self.buffer) - keep]
                    self.buffer = self.buffer[len(self.buffer) - keep :]
                    return normal, items
                normal += self.buffer[:at]
                self.buffer = self.buffer[at + len(OPEN) :]
                self.in_call, self.call, self.args_from, self.sent = True, self.call + 1, None, 0
            if self.args_from is None:
                header = _HEADER.match(self.buffer)
                if header is None:
                    return normal, items
                self.args_from = header.end()
                name = header.group(1)
                items.append(ToolCallItem(tool_index=self.call, name=name, parameters=""))
            args = self.buffer[self.args_from :]
            end = args.find(CLOSE)
            if end < 0:
                ready = max(0, len(args) - _TAIL)
                if ready > self.sent:
                    piece = args[self.sent : ready]
                    items.append(ToolCallItem(tool_index=self.call, parameters=piece))
                    self.sent = ready
                return normal, items
            whole = args[:end].rstrip()[:-1].rstrip()  # without the call's closing brace
            if len(whole) > self.sent:
                piece = whole[self.sent :]
                items.append(ToolCallItem(tool_index=self.call, parameters=piece))
            self.buffer = args[end + len(CLOSE) :]
            self.in_call = False


def _partial_suffix(text: str, marker: str) -> int:
    """How many trailing characters of ``text`` could start ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0
