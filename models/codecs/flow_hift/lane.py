"""The engine's first-chunk lane codec (models.base.LaneCodec) for the text-to-speech flow +
HiFT families (CosyVoice 2, Chatterbox): a twin of the model's detokenizer over the same
weights, with buffers and CUDA graphs of its own for lane jobs of up to GRAPH_ROWS[-1] rows:
first chunks (one flow row, two when the first-audio cover asks for the next grid point) and
urgent steady chunks (one row each); more rows replay in several calls. The family's own
detokenize runs on it, so whatever the family adds around the flow (Chatterbox's fade-in) is
the same on both contexts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream

# The family's detokenize over a given detokenizer: (detok, states, new tokens, final) → audio.
Decode = Callable[[FlowHiftDetokenizer, list, list, list[bool]], list[np.ndarray]]


class FlowHiftLane:
    GRAPH_ROWS = (1, 2, 4, 8)

    def __init__(
        self,
        detok: FlowHiftDetokenizer,
        decode: Decode,
        flow_of: Callable[[Any], FlowHiftStream],
    ) -> None:
        """`detok`: the model's detokenizer (the lane decodes on a twin of it); `flow_of`: a
        stream state's FlowHiftStream, whose device memory changes hands between the two."""
        self.detok = detok.twin(self.GRAPH_ROWS)
        self._decode = decode
        self._flow_of = flow_of
        self.max_rows = self.GRAPH_ROWS[-1]

    def detokenize(self, states: list, new_tokens: list, final: list[bool]) -> list[np.ndarray]:
        return self._decode(self.detok, states, new_tokens, final)

    def enable_cuda_graphs(self, graphs: Any) -> None:
        self.detok.enable_cuda_graphs(graphs)

    def hand_over(self, states: list, stream: Any) -> None:
        for state in states:
            self._flow_of(state).record_stream(stream)
