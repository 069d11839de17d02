"""S3Gen streamed: audio chunk by chunk while T3 still speaks, through the flow + HiFT
family's streaming detokenizer (models/codecs/flow_hift/streaming.py), batched across requests.

What differs from CosyVoice 2's streaming, and why streamed is close to, not equal to, whole:
- S3Gen's encoder and estimator attend over their whole input (the official decoder has no
  chunk mask; `static_chunk_size` 0 here). A chunk's flow row is the voice prompt, up to
  `context_chunks` generated chunks before the chunk, the chunk, and its 3 look-ahead tokens,
  all attending to each other; the chunk's frames are kept. The whole-utterance decode
  (S3Gen.decode, the official `S3Token2Wav.inference`) lets every frame also attend to the
  tokens after its chunk's look-ahead, which a stream has not seen yet, and to those before
  its window, which the bounded window leaves out for a cost that does not grow. So streamed audio departs from whole audio by that attention, and by HiFT's seams
  (8 mel frames of context each side, as for CosyVoice 2). The causal convolutions, the
  3-token look-ahead, the fixed frame-indexed noise and the carried sine phase are the same
  in both. tests/models/test_chatterbox_s3gen_stream.py measures the gap (its tolerance says why).
- The voice prompt need not be whole chunks (no attention grid to align with).
- The first 40 ms of every utterance are faded in (S3Token2Wav's trim_fade), counted over
  the samples the stream has emitted so far, so the fade is the whole decode's wherever the
  first chunk ends.
Where the math is exact: a chunk's row is the official flow's own streaming decode
(`finalize=False`: every token of the row encoded, the look-ahead tokens' frames dropped before
the estimator) of its window, and an utterance's last row the final decode; with unbounded
history (`context_chunks=None`) the windows hold every token so far, so the streamed mel is
chunk by chunk the official non-final decode of the tokens so far
(tests/models/test_chatterbox_s3gen_stream.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.chatterbox.config import SPEECH_CODES
from models.chatterbox.s3gen import S3Gen, S3GenVoice, trim_fade
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream

# Tokens per steady chunk: 1 s of speech at 25 Hz, as CosyVoice 2's flow chunk.
CHUNK_TOKENS = 25
# The first chunk: 20 tokens (+ the 3 of look-ahead) for an earlier first audio, 0.64 s to
# play (HiFT holds 4 tokens back) while the next chunk is made; as CosyVoice 2's default.
FIRST_HOP_TOKENS = 20
# Generated chunks of history each chunk's row carries besides the voice prompt: with full
# attention more history brings a chunk closer to the whole decode, at a cost per chunk
# that grows with it. Two is CosyVoice 2's bound (a chunk's row: prompt + 3 s of speech).
CONTEXT_CHUNKS = 2


@dataclass
class S3GenStream:
    flow: FlowHiftStream
    emitted_samples: int = 0  # audio already returned (for the fade-in)


class S3GenStreamer:
    def __init__(
        self,
        s3gen: S3Gen,
        chunk_tokens: int = CHUNK_TOKENS,
        first_hop: int = FIRST_HOP_TOKENS,
        context_chunks: int | None = CONTEXT_CHUNKS,
    ) -> None:
        self.detok = FlowHiftDetokenizer(
            s3gen.flow,
            s3gen.mel2wav,
            chunk_tokens,
            context_chunks=context_chunks,
            first_hop=first_hop,
        )
        self.fade = trim_fade()

    def new_stream(self, voice: S3GenVoice) -> S3GenStream:
        return S3GenStream(
            self.detok.new_stream(voice.prompt_tokens.tolist(), voice.prompt_mel, voice.xvector)
        )

    def decode(
        self,
        streams: list[S3GenStream],
        codes: list[list[int]],
        final: list[bool],
        detok: FlowHiftDetokenizer | None = None,
    ) -> list[np.ndarray]:
        """Each stream's new speech codes pushed (T3's start/stop and unused rows dropped),
        then one batched flow + HiFT call → each stream's new 24 kHz audio (maybe empty).
        `detok`: a twin of this streamer's detokenizer to decode on (the engine's first-chunk
        lane); streams are plain data either one continues."""
        detok = self.detok if detok is None else detok
        for stream, new in zip(streams, codes, strict=True):
            detok.push(stream.flow, [c for c in new if 0 <= c < SPEECH_CODES])
        out = detok.decode([s.flow for s in streams], final)
        for stream, audio in zip(streams, out, strict=True):
            at = stream.emitted_samples
            if at < len(self.fade) and len(audio):
                n = min(len(audio), len(self.fade) - at)
                audio[:n] *= self.fade[at : at + n]
            stream.emitted_samples += len(audio)
        return out

    def decode_whole(self, tokens: list[int], voice: S3GenVoice) -> np.ndarray:
        """One utterance streamed in a single final call (every chunk's row, one HiFT pass)."""
        (audio,) = self.decode([self.new_stream(voice)], [tokens], [True])
        return audio
