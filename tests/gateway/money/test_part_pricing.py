"""The token rules for non-text parts: OpenAI's documented image examples, sizes read from
real encoded images, audio by duration, and the config that names them."""

from __future__ import annotations

import base64
import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from gateway.chat.protocol import ChatCompletionRequest, to_generation
from gateway.money.image_size import HEAD_BYTES, data_url_size
from gateway.money.part_pricing import image_tiles, image_tokens, parts_upper_tokens, priceable
from gateway.money.spend import prompt_upper_tokens
from policies.loader import ConfigError, parse_config
from policies.part_tokens import AudioRate, ImageTiles
from policies.schema import GatewayConfig
from tests.support import PYTHON
from tiergate_testing.configs import fake_config
from tiergate_testing.gateways import subprocess_env

GPT4O = ImageTiles()


def data_url(width: int, height: int, kind: str, **save: Any) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(buffer, kind, **save)
    return f"data:image/{kind.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        # OpenAI's worked examples (vision guide, "calculating costs")
        ((1024, 1024), 765),
        ((2048, 4096), 1105),
        ((4096, 8192), 1105),
        # under 512 on both sides: one tile; never upscaled
        ((300, 200), 255),
        # the most any image reaches: 768 x 2048 after scaling, 2 x 4 tiles
        ((768, 2048), 85 + 170 * 8),
        ((1000, 20000), 85 + 170 * 4),  # 102 x 2048 once fitted: 1 x 4 tiles
    ],
)
def test_openai_tile_rule_matches_the_documented_examples(
    size: tuple[int, int], tokens: int
) -> None:
    url = data_url(*size, "PNG")
    assert image_tokens(GPT4O, {"url": url, "detail": "high"}) == tokens
    assert image_tokens(GPT4O, {"url": url}) == tokens  # auto: as high
    assert image_tokens(GPT4O, {"url": url, "detail": "low"}) == 85


def test_every_aspect_stays_within_the_worst_case() -> None:
    worst = max(image_tiles(w, h) for w in range(64, 5000, 97) for h in range(64, 5000, 89))
    assert worst == 8


def test_an_image_whose_size_is_unknown_costs_the_most_tiles() -> None:
    assert image_tokens(GPT4O, {"url": "https://example.com/a.png"}) == 85 + 170 * 8
    assert image_tokens(GPT4O, {"url": "data:image/png;base64,not*base64"}) == 85 + 170 * 8
    assert image_tokens(ImageTiles(base_tokens=2833, tile_tokens=5667), {"url": "x"}) == (
        2833 + 5667 * 8
    )


@pytest.mark.parametrize(
    ("kind", "save"),
    [
        ("PNG", {}),
        ("GIF", {}),
        ("JPEG", {"quality": 90}),
        ("JPEG", {"progressive": True}),
        ("WEBP", {"lossless": True}),
        ("WEBP", {"quality": 80}),
    ],
)
def test_sizes_are_read_from_the_head_of_real_images(kind: str, save: dict[str, Any]) -> None:
    assert data_url_size(data_url(1234, 567, kind, **save)) == (1234, 567)


def test_a_jpeg_size_behind_large_metadata_is_found_within_the_head() -> None:
    exif = Image.Exif()
    exif[0x010E] = "x" * 40_000  # ImageDescription: a 40 kB APP1 segment before the frame
    assert data_url_size(data_url(900, 700, "JPEG", exif=exif.tobytes())) == (900, 700)
    # An ICC profile over several segments pushes the frame past the bounded head: the
    # size is then unknown (the caller assumes the worst), never guessed.
    profile = b"\0" * (HEAD_BYTES + 1000)
    assert data_url_size(data_url(900, 700, "JPEG", icc_profile=profile)) is None


def test_audio_is_billed_for_the_longest_it_can_play() -> None:
    rule = AudioRate(tokens_per_second=10, min_bytes_per_second=1000)
    clip = base64.b64encode(b"\0" * 16_000).decode()  # 16 s at 8 kbit/s
    config = with_rules({"audio": rule.model_dump()})
    part = {"type": "input_audio", "input_audio": {"data": clip, "format": "mp3"}}
    assert parts_upper_tokens(config, ["fake-large"], [message(part)]) == 160


def with_rules(rules: dict[str, Any], model: str = "fake-large") -> GatewayConfig:
    raw = fake_config()
    raw["budgets"] = {"part_tokens": {model: rules}}
    return GatewayConfig.model_validate(raw)


def message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "Look:"}, *parts]}


def test_the_prompt_counts_parts_by_rule_not_by_their_bytes() -> None:
    config = with_rules({"image": {}, "file": 20_000})
    big = {"type": "image_url", "image_url": {"url": data_url(1024, 1024, "PNG")}}
    file = {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA"}}

    def upper(*parts: dict[str, Any], tier: str = "large") -> int:
        body = {"model": tier, "messages": [message(*parts)], "max_tokens": 1}
        generation = to_generation(ChatCompletionRequest.model_validate(body))
        return prompt_upper_tokens(config, generation, tier)

    text_only = upper()
    # the image's tiles, not its kilobytes of base64 (a byte or two for the commas left)
    assert text_only + 765 <= upper(big) <= text_only + 765 + 2
    assert text_only + 20_765 <= upper(big, file) <= text_only + 20_765 + 4
    # medium's chain (medium, small) has no rule and is never sent the image
    assert upper(big, tier="medium") - upper(tier="medium") <= 1


def test_only_priced_models_need_a_rule() -> None:
    config = with_rules({"image": 1500})
    assert priceable(config, "fake-large") == {"image"}
    assert priceable(config, "fake-medium") == frozenset()
    raw = fake_config()
    raw["prices"]["fake-small"] = {"input": 0.0, "output": 1.0}
    assert priceable(GatewayConfig.model_validate(raw), "fake-small") == {"image", "audio", "file"}


def yaml_config(rules: Any) -> str:
    raw = fake_config()
    raw["budgets"] = {"part_tokens": rules}
    return yaml.safe_dump(raw, sort_keys=False)


@pytest.mark.parametrize(
    ("rules", "fragment"),
    [
        ({"fake-huge": {"image": 100}}, "names 'fake-huge', which no engine serves"),
        ({"fake-large": {"image": -1}}, "budgets.part_tokens.fake-large.image"),
        ({"fake-large": {"video": 100}}, "budgets.part_tokens.fake-large.video"),
        ({"fake-large": {"audio": {"tokens_per_second": 0}}}, "tokens_per_second"),
    ],
)
def test_bad_rules_are_config_errors(rules: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(yaml_config(rules), "gateway.yaml")
    assert fragment in str(info.value)


def test_check_config_notes_a_modality_that_will_be_refused(tmp_path: Path) -> None:
    raw = fake_config()
    raw["engines"]["fake-large"]["modalities"] = ["text", "image", "audio"]
    raw["budgets"] = {"part_tokens": {"fake-large": {"image": {}}}}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [PYTHON, "-m", "gateway", "check-config", str(path)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if "note:" in line]
    assert len(notes) == 1
    assert "'fake-large' reads audio" in notes[0]
