"""The clip the Qwen3-TTS Base tests clone voices from (tests/models/qwen3_tts/test_qwen3_tts*.py)."""

from __future__ import annotations

import numpy as np


def clip_audio() -> np.ndarray:
    """One second at 24 kHz: a gliding tone in noise, within [-1, 1]."""
    t = np.arange(24000) / 24000
    rng = np.random.default_rng(0)
    return (
        0.4 * np.sin(2 * np.pi * (180 + 90 * t) * t) + 0.05 * rng.standard_normal(24000)
    ).astype(np.float32)
