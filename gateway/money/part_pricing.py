"""Prompt tokens a request's non-text parts may cost, by each model's ``budgets.part_tokens``.

A reservation counts an image, audio clip or file by its model's rule instead of by the
bytes of its JSON (a URL is ~40 bytes; a provider bills it as up to 1,445 tokens). A priced
model without a rule for a modality cannot be reserved for, so such parts are refused there
(``gateway.core.capabilities``); a model priced at zero costs nothing whatever it reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from backends.messages import PART_MODALITIES
from gateway.money.image_size import data_url_size
from policies.part_tokens import AudioRate, ImageTiles, PartTokens
from policies.schema import GatewayConfig

NON_TEXT = frozenset(PART_MODALITIES.values()) - {"text"}
# OpenAI's scaling leaves at most 768 x 2048 pixels: 2 x 4 tiles of 512.
WORST_TILES = 8


def non_text_parts(
    messages: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(modality, part)`` for each image, audio or file part of the messages."""
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            modality = PART_MODALITIES.get(str(part.get("type")), "text")
            if modality != "text":
                yield modality, part


def non_text_bytes(messages: Iterable[Mapping[str, Any]]) -> int:
    """The JSON bytes of the non-text parts: counted by rule, not as text."""
    return sum(len(orjson.dumps(part)) for _, part in non_text_parts(messages))


def priceable(config: GatewayConfig, model: str) -> frozenset[str]:
    """The non-text modalities a reservation on ``model`` can price."""
    price = config.prices.get(model)
    if price is None or (price.input == 0 and not price.cached_input):
        return NON_TEXT  # reading costs nothing on this model
    rules = config.budgets.part_tokens.get(model)
    if rules is None:
        return frozenset()
    return frozenset(m for m in NON_TEXT if rules.rule(m) is not None)


def parts_upper_tokens(
    config: GatewayConfig, models: Sequence[str], messages: Iterable[Mapping[str, Any]]
) -> int:
    """The most the non-text parts may cost on any of ``models`` that has a rule for them."""
    rules = [r for r in (config.budgets.part_tokens.get(m) for m in models) if r is not None]
    total = 0
    for modality, part in non_text_parts(messages):
        total += max((part_tokens(r, modality, part) for r in rules), default=0)
    return total


def part_tokens(rules: PartTokens, modality: str, part: Mapping[str, Any]) -> int:
    rule = rules.rule(modality)
    if rule is None:
        return 0
    if isinstance(rule, ImageTiles):
        return image_tokens(rule, part.get("image_url"))
    if isinstance(rule, AudioRate):
        return audio_tokens(rule, part.get("input_audio"))
    return rule


def image_tokens(rule: ImageTiles, image: Any) -> int:
    """By OpenAI's rule; an image whose size is not in a ``data:`` URL gets the most tiles."""
    url = image.get("url") if isinstance(image, Mapping) else image
    detail = image.get("detail") if isinstance(image, Mapping) else None
    if detail == "low":
        return rule.base_tokens
    size = data_url_size(url) if isinstance(url, str) else None
    tiles = WORST_TILES if size is None else image_tiles(*size)
    return rule.base_tokens + rule.tile_tokens * tiles


def image_tiles(width: int, height: int) -> int:
    """512-pixel tiles after scaling to fit 2048 x 2048, then to a shortest side ≤ 768."""
    scale = min(1.0, 2048 / max(width, height))
    scale *= min(1.0, 768 / (min(width, height) * scale))
    # Round the scaled sides up: a provider that rounds them never lands on more tiles.
    w, h = math.ceil(width * scale), math.ceil(height * scale)
    return min(math.ceil(w / 512) * math.ceil(h / 512), WORST_TILES)


def audio_tokens(rule: AudioRate, audio: Any) -> int:
    """The clip's decoded size over the lowest bitrate: the longest it can play."""
    data = audio.get("data") if isinstance(audio, Mapping) else None
    size = len(data) * 3 // 4 - data[-2:].count("=") if isinstance(data, str) else 0
    return math.ceil(size / rule.min_bytes_per_second * rule.tokens_per_second)


def unpriced_notes(config: GatewayConfig) -> list[str]:
    """Each engine that declares a modality its priced model has no rule for: such parts
    will be refused there (what ``tiergate check-config`` notes)."""
    notes = []
    for name, spec in config.engines.items():
        missing = sorted(set(spec.modalities) - {"text"} - priceable(config, spec.model))
        if missing:
            notes.append(
                f"engine {name!r} reads {', '.join(missing)} but budgets.part_tokens has no "
                f"rule for it on {spec.model!r}: such parts get 400 unsupported_content"
            )
    return notes
