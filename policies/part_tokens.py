"""What a non-text content part may cost in prompt tokens, per model (``budgets.part_tokens``).

Providers bill an image, an audio clip or a file as hundreds to thousands of prompt tokens,
not as the bytes of its URL, so a reservation needs a rule for each modality a priced model
reads. A number is a per-part worst case; the structured rules follow how the provider counts.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from policies.frozen import Frozen

PartCap = Annotated[int, Field(ge=0)]  # tokens one part may cost at most


class ImageTiles(Frozen):
    """OpenAI's vision rule: ``detail: low`` costs ``base_tokens``; ``high`` and ``auto``
    cost ``base_tokens + tile_tokens`` per 512-pixel tile of the image once scaled to fit
    2048x2048 and then to a shortest side of at most 768. The defaults are GPT-4o's
    (gpt-4o-mini bills 2833 + 5667 per tile)."""

    base_tokens: int = Field(85, ge=0)
    tile_tokens: int = Field(170, ge=0)


class AudioRate(Frozen):
    """Audio billed by duration: ``tokens_per_second`` of the longest the clip can last,
    which is its decoded size over the lowest bitrate it may be encoded at."""

    tokens_per_second: float = Field(gt=0)
    min_bytes_per_second: int = Field(1000, ge=1)  # 8 kbit/s: below any speech codec in use


class PartTokens(Frozen):
    """One model's rules; a modality left unset cannot be priced on that model."""

    image: PartCap | ImageTiles | None = None
    audio: PartCap | AudioRate | None = None
    file: PartCap | None = None  # a file's pages are unknown before it is read

    def rule(self, modality: str) -> int | ImageTiles | AudioRate | None:
        rules: dict[str, int | ImageTiles | AudioRate | None] = {
            "image": self.image,
            "audio": self.audio,
            "file": self.file,
        }
        return rules.get(modality)
