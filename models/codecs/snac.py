"""SNAC 24 kHz (hubertsiuzdak/snac_24khz) as a batched, streaming detokenizer.

The architecture is the `snac` package's `SNAC`; snac_checkpoint loads and saves it in the
published layout, snac_noise makes its decoder's noise deterministic, and snac_streaming runs
its decoder incrementally: every frame pushed is decoded once, and the audio streamed equals
one decode of the whole utterance (float rounding aside). A frame is 7 codes in SNAC
hierarchical order `[l0, l1a, l1b, l2a, l2b, l2c, l2d]` (one level-0, two level-1, four level-2
codes) and decodes to 2048 samples (4 latent steps of 512). Orpheus interleaves its 7 tokens
differently; reordering them is the Orpheus model's job.

Latency: a sample is final once every frame it depends on is in, which the decoder's symmetric
convolutions put 4757 samples (2.32 frames) after it, so a stream's first audio needs 3 frames
(it holds 1387 samples), and each frame after gives 2048 more. Cost: a frame costs the same
however many come in a call, since no context is decoded twice; windows with 3 frames of
context each side (the older way) cost 13 frames of compute for 8 out, 6 for 1.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from snac import SNAC

# Loading/saving and the positional noise live in their own modules; their public names are
# re-exported so that `from models.codecs.snac import …` still reaches every SNAC name.
from models.codecs.snac_checkpoint import (
    CONFIG_FILE,
    DEFAULT_REPO,
    WEIGHTS_FILE,
    fold_weight_norm,
    load_snac,
    save_snac,
    snac_24khz_config,
    snac_config,
    tiny_snac_config,
)
from models.codecs.snac_noise import (
    NoiseContext,
    PositionalNoise,
    install_positional_noise,
    positional_normal,
)
from models.codecs.snac_streaming import OPEN_END, StreamingSnacDecoder

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_REPO",
    "WEIGHTS_FILE",
    "NoiseContext",
    "PositionalNoise",
    "SnacDetokenizer",
    "SnacStream",
    "fold_weight_norm",
    "install_positional_noise",
    "load_snac",
    "positional_normal",
    "save_snac",
    "snac_24khz_config",
    "snac_config",
    "tiny_snac_config",
]


@dataclass
class SnacStream:
    """One request's detokenizer state: its frames not decoded yet and its place in the
    decoder's state pool (a slot, held until the stream ends or is dropped)."""

    seed: int = 0  # noise seed (PositionalNoise)
    slot: int = 0
    frames: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), dtype=np.int64))  # [N, 7]
    fed: int = 0  # frames decoded so far
    emitted: int = 0  # samples returned so far
    finished: bool = False  # final flush done; no more frames accepted
    release: Callable[[], Any] | None = field(default=None, repr=False)

    @property
    def total(self) -> int:
        """Frames pushed so far."""
        return self.fed + len(self.frames)


@dataclass(frozen=True)
class _Piece:
    row: int  # index into the streams of this decode call
    start: int  # first frame fed (absolute)
    frames: np.ndarray  # [n, 7]: the stream's frames, or zeros that flush a final stream
    end: int  # the stream's length in frames when it ends with this call, else -1


class SnacDetokenizer:
    """Turns per-request SNAC frames into audio chunks: each decode call feeds every stream
    the frames pushed since its last one (in pieces of PIECES frames, pieces of equal size from
    all streams batched into one call of the streaming decoder). `chunk_frames` and
    `large_chunk_frames` are the model's chunking facts for the engine's scheduler (how many
    frames a steady chunk waits for); the decoder itself decodes whatever it is given."""

    PIECES = (8, 4, 2, 1)  # frames a row per decoder call: a few shapes for CUDA graphs
    GRAPH_BATCHES = (1, 2, 4, 8, 16, 32, 64)

    def __init__(
        self,
        model: SNAC,
        chunk_frames: int = 4,
        large_chunk_frames: int = 8,
        max_streams: int = 1024,
    ):
        strides = [int(s) for s in model.vq_strides]
        if strides != [4, 2, 1]:
            raise ValueError(
                f"SnacDetokenizer needs vq_strides [4, 2, 1] (snac_24khz), got {strides}"
            )
        for name, value, least in (
            ("chunk_frames", chunk_frames, 1),
            ("large_chunk_frames", large_chunk_frames, chunk_frames),
            ("max_streams", max_streams, 1),
        ):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.model = model.eval()
        install_positional_noise(model)
        fold_weight_norm(model)
        self.decoder = StreamingSnacDecoder(model, max_streams)
        self.chunk = chunk_frames
        # A comfortable listener waits for this many frames (ModelFacts.large_chunk_tokens):
        # fewer, larger codec jobs, each with its fixed cost (launches, hand-offs) paid once.
        self.large_chunk = large_chunk_frames
        self.latent_per_frame = strides[0]  # 4 latent steps of 512 samples
        self.device = next(model.parameters()).device
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran

    @property
    def samples_per_frame(self) -> int:
        return int(self.model.hop_length) * self.latent_per_frame

    @property
    def sample_rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def delay_samples(self) -> int:
        """How far the audio out runs behind the frames in (samples)."""
        return self.decoder.delay_samples

    @property
    def first_audio_frames(self) -> int:
        """Frames a stream must have before its first audio comes out."""
        return self.delay_samples // self.samples_per_frame + 1

    @property
    def held_back_codes(self) -> int:
        """The delay in codes (7 a frame), rounded up: how much shorter than its codes a
        stream's audio so far is (ModelFacts.held_back_tokens)."""
        return -(-self.delay_samples * 7 // self.samples_per_frame)

    def new_stream(self, seed: int = 0) -> SnacStream:
        """A fresh stream; `seed` picks its noise (only the low 32 bits matter). It holds a
        decoder slot until its final decode, or until it is dropped."""
        slot = self.decoder.acquire()
        stream = SnacStream(seed=seed % 2**32, slot=slot)
        stream.release = weakref.finalize(stream, self.decoder.release, slot)
        return stream

    def push(self, stream: SnacStream, frames: list[list[int]]) -> None:
        """Append frames, each 7 codes `[l0, l1a, l1b, l2a, l2b, l2c, l2d]` in [0, codebook)."""
        if stream.finished:
            raise ValueError("cannot push frames into a SNAC stream after its final decode")
        if not frames:
            return
        codes = np.asarray(frames, dtype=np.int64)
        if codes.ndim != 2 or codes.shape[1] != 7:
            raise ValueError(f"SNAC frames must each hold 7 codes, got shape {codes.shape}")
        if codes.min() < 0 or codes.max() >= self.model.codebook_size:
            raise ValueError(
                f"SNAC codes must lie in [0, {self.model.codebook_size}), got {codes.min()}.."
                f"{codes.max()}; subtract the LLM's audio-token offsets before pushing"
            )
        stream.frames = np.concatenate([stream.frames, codes])

    def _pieces(self, row: int, stream: SnacStream, final: bool) -> list[_Piece]:
        """The stream's pending frames in PIECES-sized pieces, largest first; when final, then
        frames of zeros enough to push its last samples out (its end masks them)."""
        if stream.finished:
            return []
        end = stream.total if final else -1
        flush = -(-self.delay_samples // self.samples_per_frame) if final else 0
        frames = np.concatenate([stream.frames, np.zeros((flush, 7), dtype=np.int64)])
        pieces, done = [], 0
        for size in self.PIECES:
            while len(frames) - done >= size:
                pieces.append(_Piece(row, stream.fed + done, frames[done : done + size], end))
                done += size
        return pieces

    def decode(self, streams: list[SnacStream], final: list[bool]) -> list[np.ndarray]:
        """Emit each stream's newly final audio (float32 mono, possibly empty) and advance it;
        with final, all of its audio, and its slot is freed."""
        if len(streams) != len(final):
            raise ValueError(f"got {len(streams)} streams but {len(final)} final flags")
        per_stream = [
            self._pieces(i, s, f) for i, (s, f) in enumerate(zip(streams, final, strict=True))
        ]
        out: list[list[np.ndarray]] = [[] for _ in streams]
        # Round r decodes each stream's r-th piece, so a stream's pieces run in order.
        for r in range(max((len(p) for p in per_stream), default=0)):
            by_size: dict[int, list[_Piece]] = {}
            for pieces in per_stream:
                if r < len(pieces):
                    by_size.setdefault(len(pieces[r].frames), []).append(pieces[r])
            for group in by_size.values():
                for lo in range(0, len(group), self.GRAPH_BATCHES[-1]):
                    part = group[lo : lo + self.GRAPH_BATCHES[-1]]
                    for piece, audio in zip(part, self._decode_group(streams, part), strict=True):
                        out[piece.row].append(self._keep(streams[piece.row], piece, audio))
        for stream, fin in zip(streams, final, strict=True):
            stream.fed = stream.total
            stream.frames = stream.frames[:0]
            if fin and not stream.finished:
                stream.finished = True
                if stream.release is not None:
                    stream.release()  # the slot goes back now, not when the stream is dropped
        return [np.concatenate(a) if a else np.zeros(0, np.float32) for a in out]

    def _keep(self, stream: SnacStream, piece: _Piece, audio: np.ndarray) -> np.ndarray:
        """The piece's audio that belongs to the stream: from its first sample on, and up to
        its last when it ends (the flush's zeros decode past it)."""
        first = piece.start * self.samples_per_frame - self.delay_samples
        lo = max(0, -first)
        hi = len(audio)
        if piece.end >= 0:
            hi = min(hi, piece.end * self.samples_per_frame - first)
        kept = audio[lo:hi] if hi > lo else audio[:0]
        stream.emitted += len(kept)
        return kept

    @torch.inference_mode()
    def _decode_group(self, streams: list[SnacStream], group: list[_Piece]) -> list[np.ndarray]:
        """One streaming-decoder call over pieces of equal length; each piece's audio."""
        frames = np.stack([p.frames for p in group])  # [B, n, 7]
        latent = self.latent_per_frame
        start = np.array([p.start * latent for p in group], dtype=np.int64)
        end = np.array([p.end * latent if p.end >= 0 else OPEN_END for p in group], dtype=np.int64)
        seed = np.array([streams[p.row].seed for p in group], dtype=np.int64)
        slots = np.array([streams[p.row].slot for p in group], dtype=np.int64)
        n, length = len(group), frames.shape[1]
        bucket = self._graph_bucket(n, length)
        arrays = [frames, start, end, seed, slots]
        if bucket is not None:  # pad with copies of row 0 on the scratch slot (0)
            pad = [0] * (bucket - n)
            arrays = [np.concatenate([a, a[pad]]) for a in arrays]
            arrays[4][n:] = 0
        inputs = [torch.from_numpy(a).to(self.device, non_blocking=True) for a in arrays]
        if bucket is not None:
            audio = self.graphs.run(("snac", bucket, length), self.decoder.step, inputs)[:n]
        else:
            audio = self.decoder.step(*inputs)
        return list(audio.float().cpu().numpy())

    # --- CUDA graphs ------------------------------------------------------------------------------
    def enable_cuda_graphs(self, graphs) -> None:
        """Capture every piece size at each GRAPH_BATCHES size with the engine's
        CallableGraphs (on the scratch slot, so no stream's state moves)."""
        self.graphs = graphs
        with torch.inference_mode():
            for batch in self.GRAPH_BATCHES:
                for length in self.PIECES:
                    zeros = torch.zeros(batch, dtype=torch.int64, device=self.device)
                    inputs = [
                        torch.zeros(batch, length, 7, dtype=torch.int64, device=self.device),
                        zeros,
                        torch.full_like(zeros, OPEN_END),
                        zeros,
                        zeros,
                    ]
                    graphs.capture(("snac", batch, length), self.decoder.step, inputs)

    def _graph_bucket(self, n: int, length: int) -> int | None:
        if self.graphs is None:
            return None
        bucket = next((b for b in self.GRAPH_BATCHES if b >= n), None)
        return bucket if bucket is not None and ("snac", bucket, length) in self.graphs else None
