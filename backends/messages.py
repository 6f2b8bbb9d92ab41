"""Chat messages as OpenAI sends them: content as a string or a list of typed parts.

Every backend accepts text parts in any role; other parts carry a modality that only an
engine declaring it may receive (the gateway checks before dispatch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# OpenAI content part type → the modality an engine must declare to receive it.
PART_MODALITIES = {
    "text": "text",
    "refusal": "text",  # an assistant turn's refusal, replayed in the history
    "image_url": "image",
    "input_audio": "audio",
    "file": "file",
}
MODALITIES = frozenset(PART_MODALITIES.values())


def content_text(content: Any) -> str:
    """A message's text: a string as is; text parts joined by newlines (as vLLM joins them
    for templates that expect a string); ``None`` as empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = [str(p.get("text") or p.get("refusal") or "") for p in content]
    return "\n".join(t for t in texts if t)


def content_modalities(messages: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Each non-text modality the messages use → the ``param`` of its first part."""
    found: dict[str, str] = {}
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            modality = PART_MODALITIES.get(str(part.get("type")), "text")
            if modality != "text":
                found.setdefault(modality, f"messages[{i}].content[{j}]")
    return found
