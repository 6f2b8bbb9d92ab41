"""``python -m tiergate_testing.prompt_ids serve …``: ``python -m gateway``, except that a chat
request's id is a digest of its messages (``chatcmpl-`` and 32 hex digits, as a random id
looks) instead of random bits.

The feedback loop picks a request's shadow tier by a hash of its id
(``gateway.learning.sampler.shadow_tier``), so a replay of the same prompts labels the
same pairs on every run. For traffic whose prompts are all distinct: ids must be unique.
"""

from __future__ import annotations

import json
from dataclasses import replace

from backends.base import GenerationRequest
from gateway.chat import render
from gateway.chat.protocol import CHAT_IDS, ChatCompletionRequest, to_generation
from gateway.cli.main import main


def _named_by_prompt(body: ChatCompletionRequest) -> GenerationRequest:
    generation = to_generation(body)
    messages = json.dumps(generation.messages, sort_keys=True)
    return replace(generation, request_id=CHAT_IDS.stable(messages))


vars(render)["to_generation"] = _named_by_prompt  # what the chat format's ``translate`` calls

if __name__ == "__main__":
    raise SystemExit(main())
