"""Qwen3-TTS's first-chunk lane codec (models.base.LaneCodec): the 12 Hz decoder's second
context (CodecStreams.twin: the same weights and state slots, graphs and a staging buffer of
its own for up to LANE_GRAPH_ROWS[-1] rows a call), on which the engine decodes requests'
first chunks, and chunks whose listener would run dry, while a steady job runs.

Why: the steady codec's jobs grow with the streams (at 20 req/s on an H100, 53 ms at 20 rows
with the engine's margin, 29-31 ms at 15 with the model's own), and a first chunk that waits
for the job in flight and then rides the next one waits for both; on the lane it is a job of
a row or two of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from models.base import StreamState, Token
from models.qwen3_tts.codec_streams import CodecStreams

# The model's detokenize over a given context: (context, states, new tokens) → audio.
Decode = Callable[[CodecStreams, list[StreamState], list[list[Token]]], list[np.ndarray]]


class Qwen3TtsLane:
    def __init__(self, codec: CodecStreams, decode: Decode) -> None:
        self.codec = codec.twin()
        self._decode = decode
        self.max_rows = self.codec.graph_rows[-1]

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        return self._decode(self.codec, states, new_tokens)

    def enable_cuda_graphs(self, graphs: Any) -> None:
        self.codec.enable_cuda_graphs(graphs)

    def hand_over(self, states: list[StreamState], stream: Any) -> None:
        """Nothing to record: a stream's state is its row in the slots both contexts share,
        which no stream frees (StateSlots serialises their use across threads)."""
