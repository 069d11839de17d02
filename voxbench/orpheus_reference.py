"""Orpheus's reference path through transformers `generate`: the token → audio scheme of
orpheus_tts/decoder.py as a streamer, and the audio-token constraint as a logits processor.

Reference scheme: every 7 new audio tokens once at least 28 exist, SNAC decodes the last 4
frames and keeps samples 2048:4096 (the 2nd frame). The constraint is not in the reference (a
trained model emits audio tokens by itself); with random weights it keeps the work equal to
the engine's, which applies the same one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from transformers import LogitsProcessor
from transformers.generation.streamers import BaseStreamer

from models.orpheus import tokens as T

WINDOW_TOKENS = 28  # 4 SNAC frames decoded per chunk
KEEP = slice(2048, 4096)  # the samples of the 2nd frame


class AudioTokenMask(LogitsProcessor):
    """Only the 4096 tokens of the code position being generated; the stop token only at a
    frame boundary once min_tokens are out (the engine's constraint, for equal work)."""

    def __init__(self, prompt_len: int, min_tokens: int) -> None:
        self.prompt_len = prompt_len
        self.min_tokens = min_tokens

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids.shape[1] - self.prompt_len
        lo, hi = T.audio_range(generated)
        masked = torch.full_like(scores, float("-inf"))
        masked[:, lo:hi] = scores[:, lo:hi]
        if generated >= self.min_tokens and generated % T.CODES_PER_FRAME == 0:
            masked[:, T.END_OF_SPEECH] = scores[:, T.END_OF_SPEECH]
        return masked


class ReferenceStreamer(BaseStreamer):
    """Orpheus's reference token → audio scheme, fed by `generate` one token at a time."""

    def __init__(
        self, decode: Callable[[list[int]], np.ndarray], emit: Callable[[np.ndarray], None]
    ) -> None:
        self._decode = decode
        self._emit = emit
        self._prompt_seen = False
        self.codes: list[int] = []  # SNAC codes of the valid audio tokens, in Orpheus order

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() hands over the prompt first
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            code = T.code_of(token, len(self.codes))
            if code is None:  # the reference skips what is not an audio token of its position
                continue
            self.codes.append(code)
            n = len(self.codes)
            if n % T.CODES_PER_FRAME == 0 and n >= WINDOW_TOKENS:
                self._emit(self._decode(self.codes[-WINDOW_TOKENS:]))

    def end(self) -> None:
        pass


def snac_reference_decoder(snac, device: torch.device) -> Callable[[list[int]], np.ndarray]:
    """orpheus_tts `convert_to_audio`: 28 codes (4 frames, Orpheus order) → the 2nd frame."""

    @torch.inference_mode()
    def decode(codes: list[int]) -> np.ndarray:
        frames = torch.tensor(codes, dtype=torch.int32, device=device).view(-1, T.CODES_PER_FRAME)
        levels = [
            frames[:, 0].reshape(1, -1),
            frames[:, [1, 4]].reshape(1, -1),
            frames[:, [2, 3, 5, 6]].reshape(1, -1),
        ]
        audio = snac.decode(levels)  # [1, 1, 4 * 2048]
        return audio[0, 0, KEEP].float().cpu().numpy()

    return decode
