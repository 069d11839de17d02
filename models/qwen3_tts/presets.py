"""`tiny-qwen3-tts` (seeded random weights at scaled-down sizes) and the real configurations
with random weights (`qwen3-tts-0.6b|1.7b --random-weights`), written in the published layout
on first use and loaded through the real loader."""

from __future__ import annotations

from pathlib import Path

from models.preset_cache import materialise
from models.qwen3_tts import configs
from models.qwen3_tts.checkpoint import write_checkpoint
from models.qwen3_tts.tiny_tokenizer import write_tiny_tokenizer

PRESET_VERSION = "v3"  # bump when what the writer produces changes
_REAL = {
    "qwen3-tts-0.6b": configs.QWEN3_TTS_0_6B,
    "qwen3-tts-1.7b": configs.QWEN3_TTS_1_7B,
    "qwen3-tts-1.7b-voice-design": configs.QWEN3_TTS_1_7B_VOICE_DESIGN,
    "qwen3-tts-0.6b-base": configs.base(configs.QWEN3_TTS_0_6B),
    "qwen3-tts-1.7b-base": configs.base(configs.QWEN3_TTS_1_7B),
}


def ensure_tiny_qwen3_tts(root: Path | None = None) -> Path:
    def write(folder: Path) -> None:
        write_checkpoint(
            folder / "model",
            configs.TINY_QWEN3_TTS,
            configs.TINY_SPEECH_TOKENIZER,
            seed=0,
            tokenizer=write_tiny_tokenizer,
        )

    return materialise(f"tiny-qwen3-tts-{PRESET_VERSION}", write, root) / "model"


def ensure_random_qwen3_tts(preset: str, root: Path | None = None) -> Path:
    """A real configuration (talker, code predictor, 12 Hz decoder) with seeded random weights
    and the tiny preset's tokenizer (its ids are the real special ids): the real shapes for
    GPU measurements without downloading weights."""

    def write(folder: Path) -> None:
        write_checkpoint(
            folder / "model",
            _REAL[preset],
            configs.SPEECH_TOKENIZER,
            seed=0,
            tokenizer=write_tiny_tokenizer,
        )

    return materialise(f"{preset}-random-{PRESET_VERSION}", write, root) / "model"
