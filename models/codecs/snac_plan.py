"""Which of a SNAC stream's frames come out as audio, and when: the chunk plan of
models/codecs/snac.py's streaming detokenizer, as arithmetic on frame counts alone.

Torch-free, so that what needs the plan without the codec can share it: the detokenizer itself,
the engine's question whether a stream's next frames would make audio yet
(OrpheusModel.codec_would_emit), and the simulator that runs the real scheduler at a GPU's
costs (voxbench/realtime_sim.py), whose young listeners' cover depends on exactly when a
first chunk's look-ahead frames become audio.

Chunks ramp 1, 1, 2, 4 frames (each at most `chunk_ramp` of the frames already out), then 8
(`large_chunk_frames`) whenever that many are in. Chunk [s, e) is due once frames up to
e + R exist (R = `lookahead_frames`); the stateful decoder is then fed up to e + R and emits
every sample whose inputs are all in. A sample depends on the decoder's delay of input after
it, so a non-final stream's audio ends `delay - R x frame` samples short of its emitted frames
(SNAC 24 kHz: 4,757 - 4,096 = 661 samples, 28 ms); its end flushes the rest. A stream in a
hurry (its listener about to run dry) emits every frame it has past the look-ahead instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SnacChunkPlan:
    """A SNAC stream's chunking, in frames (one frame: 7 codes, 2,048 samples at 24 kHz)."""

    lookahead_frames: int = 2
    chunk_frames: int = 4
    first_chunk_frames: int = 1
    # A comfortable listener's chunk: one call of 8 frames costs less a frame than two of 4
    # (bench/snac_cost.py); the engine lets such a listener wait for it.
    large_chunk_frames: int = 8
    chunk_ramp: float = 1.0

    def __post_init__(self) -> None:
        for name, value, least in (
            ("lookahead_frames", self.lookahead_frames, 0),
            ("chunk_frames", self.chunk_frames, 1),
            ("first_chunk_frames", self.first_chunk_frames, 1),
            ("large_chunk_frames", self.large_chunk_frames, self.chunk_frames),
        ):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not 0 < self.chunk_ramp <= 1:
            raise ValueError(f"snac chunk_ramp must be in (0, 1], got {self.chunk_ramp!r}")

    @property
    def first_audio_frames(self) -> int:
        """Frames a stream must have before its first (non-final) audio comes out."""
        return self.first_chunk_frames + self.lookahead_frames

    def chunk_size(self, start: int) -> int:
        """The ramp's chunk from frame `start` (before a large chunk replaces a full one)."""
        if start == 0:
            return self.first_chunk_frames
        # At most chunk_ramp of the frames out, rounded up (the float's error aside).
        ramped = math.ceil(self.chunk_ramp * start - 1e-9)
        return min(self.chunk_frames, max(self.first_chunk_frames, ramped))

    def chunks(
        self, emitted: int, total: int, final: bool, hurry: bool = False
    ) -> list[tuple[int, int]]:
        """[start, end) of each chunk emittable from a stream that has emitted `emitted` of
        its `total` frames. Early chunks stay small while the listener's buffer is small, later
        ones amortise a call's fixed cost; a steady chunk is large_chunk_frames whenever that
        many frames are ready. `hurry`: the listener is about to run dry (the engine hands
        such a stream fewer frames than a chunk): every frame past the look-ahead comes out
        now, as one chunk, rather than none until the next whole chunk is in."""
        right = self.lookahead_frames
        if hurry and not final:
            return [(emitted, total - right)] if total - right > emitted else []
        chunks, start = [], emitted
        while start < total:
            size = self.chunk_size(start)
            if size == self.chunk_frames and start + self.large_chunk_frames + right <= total:
                size = self.large_chunk_frames
            end = start + size
            if end + right > total:
                if not final:
                    break  # wait for the lookahead frames
                end = min(end, total)  # the whole decode has no more right context either
            chunks.append((start, end))
            start = end
        if emitted == 0 and chunks and not final and total - right > start:
            # A stream's first job emits every frame it has (all but the look-ahead), not
            # only whole ramp chunks: its audio is the listener's cover until the next chunk,
            # and the engine sizes a first chunk by the whole frames it holds
            # (ChunkingFacts.first_chunk_audio_tokens). With whole chunks only, 7-9 frames
            # gave 314 ms where the engine counted on 390-561 ms.
            chunks.append((start, total - right))
        return chunks

    def hurried(self, new_frames: float, final: bool) -> bool:
        """Whether a job that hands a stream `new_frames` frames (a part of one counts) is in a hurry: fewer than a
        chunk, not its end. The engine hands a listener less than a chunk only when it is
        about to run dry (Scheduler._detok_ready), so such a job lets out every frame it has
        past the look-ahead (chunks) rather than none until the chunk is whole."""
        return not final and new_frames < self.chunk_frames

    def would_emit(self, emitted: int, total: int, new_frames: int, hurry: bool = False) -> bool:
        """Whether a (non-final) decode would emit audio once `new_frames` more frames are
        pushed: past its first chunks a stream emits whole chunks only, so one or two new
        frames may give nothing yet (in a `hurry`, any frame past the look-ahead does).
        chunks()' first chunk, without the plan: the engine asks this of hundreds of streams a
        step. (A large chunk is taken only where it fits, so the plan has a chunk exactly when
        the ramp's next one and its look-ahead fit.)"""
        size = 1 if hurry else self.chunk_size(emitted)
        return emitted + size + self.lookahead_frames <= total + new_frames

    def schedule(self, n_chunks: int) -> list[tuple[int, int]]:
        """[start, end) of the first n_chunks non-final chunks of a long stream."""
        return self.chunks(0, 10_000, final=False)[:n_chunks]

    def samples_out(
        self, emitted: int, total: int, final: bool, samples_per_frame: int, delay_samples: int
    ) -> int:
        """Samples of audio out once `emitted` frames are (all `total` when `final`): the
        decoder, fed up to the emitted frames and their look-ahead, holds back what depends on
        input past them (`delay_samples` of it, less the look-ahead's), until the end flushes."""
        if final:
            return total * samples_per_frame
        held = delay_samples - self.lookahead_frames * samples_per_frame
        return max(0, emitted * samples_per_frame - held) if emitted else 0
