"""SNAC 24 kHz (hubertsiuzdak/snac_24khz) as a batched, streaming detokenizer.

The architecture is the `snac` package's `SNAC`; snac_checkpoint loads and saves it in the
published layout, snac_noise makes its decoder's noise deterministic, and this module decodes
per-request code streams in windows. A frame is 7 codes in SNAC hierarchical order
`[l0, l1a, l1b, l2a, l2b, l2c, l2d]` (one level-0, two level-1, four level-2 codes) and decodes to
2048 samples (4 latent steps of 512). Orpheus interleaves its 7 tokens differently; reordering
them is the Orpheus model's job.

Windows: to emit frames [s, e) the decoder runs on frames [max(0, s-L), min(n, e+R)) and the
samples of [s, e) are cut out. A stream's first window starts at frame 0 and its final one ends at
its last frame, exactly the edges a whole decode sees, so the only mismatch is at interior seams,
where a window's zero padding stands in for real activations. The decoder is all symmetric convs
(latent k7; per upsampling block a transposed conv k=2·stride and k7 residual units dilated
1/3/9; output k7): changing one frame moves samples ≈2.3 frames to each side of it (measured), so
L = R = 3 see everything an emitted sample depends on. Orpheus's reference server decodes 4-frame
windows and keeps the 2nd frame (L=1, R=2), which cuts the left side short.

Seam error vs one whole decode (40 random frames, random weights, CPU float32, a seam after every
frame): max |streamed - whole| / RMS(whole), and in brackets RMS(streamed - whole) / RMS(whole).

    (L, R)        (1, 2) Orpheus    (2, 2)           (3, 1)           (3, 2) default   (3, 3)
    tiny 16/64    7.1e-2 (4.0e-3)   1.1e-3 (4.7e-5)  6.9e-2 (4.2e-3)  1.1e-3 (3.0e-5)  1.1e-6 (2.2e-7)
    real 48/1024  9.8e-2 (9.8e-3)   2.3e-3 (1.3e-4)  1.1e-1 (1.1e-2)  2.3e-3 (9.4e-5)  3.5e-6 (6.6e-7)

Defaults L=3 (costs compute only), R=2: first audio once first_chunk_frames + 2 frames exist, with
a seam error ~1e-4 of the signal RMS (-80 dB); lookahead_frames=3 makes seams exact (float
rounding) for one more frame (7 tokens, 85 ms) of time to first audio. These are random weights;
re-measure with the trained checkpoint before tightening the defaults.

`--snac-streaming` (SnacDetokenizer.enable_streaming) replaces the windows with the stateful
decoder of models/codecs/snac_streaming.py: no context re-decoded, no seam error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

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
from models.codecs.snac_streaming import NO_END, StreamingSnacDecoder

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
    """One request's detokenizer state. Frames older than the left context of the next window
    are dropped, so memory stays bounded however long the utterance."""

    seed: int = 0  # noise seed (PositionalNoise)
    frames: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), dtype=np.int64))  # [N, 7]
    base: int = 0  # absolute index of frames[0]
    emitted: int = 0  # frames whose audio has been returned (streaming: whose chunk has)
    finished: bool = False  # final flush done; no more frames accepted
    # With the stateful decoder (SnacDetokenizer.enable_streaming): frames fed to it so far,
    # and its per-conv state for this stream (None before the first call).
    fed: int = 0
    state: torch.Tensor | None = None  # [1, state_size]

    @property
    def total(self) -> int:
        """Frames pushed so far."""
        return self.base + len(self.frames)

    def forget_before(self, frame: int) -> None:
        """Drop the frames before absolute index `frame`: no later decode reads them."""
        drop = frame - self.base
        if drop > 0:
            self.frames = self.frames[drop:]
            self.base += drop

    def window(self, lo: int, hi: int) -> np.ndarray:
        """Frames [lo, hi) by absolute index: [hi - lo, 7]."""
        return self.frames[lo - self.base : hi - self.base]


@dataclass(frozen=True)
class _Window:
    row: int  # index into the streams of this decode call
    start: int  # first frame to emit
    end: int  # one past the last frame to emit
    lo: int  # first frame decoded (start minus left context)
    hi: int  # one past the last frame decoded (end plus lookahead)


@dataclass(frozen=True)
class _Feed:
    """One stream's part of a stateful call (SnacDetokenizer._decode_stateful)."""

    row: int  # index into the streams of this decode call
    fed: int  # frames fed before this call
    upto: int  # frames fed after it
    final: bool  # the stream ends here: flush frames follow its last
    emitted: int  # the chunk plan's emitted frames after it

    def length(self, flush_frames: int) -> int:
        """Frames in the call: the new ones, and the flush at the end."""
        return self.upto - self.fed + (flush_frames if self.final else 0)


class SnacDetokenizer:
    """Turns per-request SNAC frames into audio chunks, batching windows of equal length from
    all streams into one SNAC.decode call (or, after enable_streaming, the stateful decoder's
    calls on the same chunk schedule). Settings are in frames (2048 samples, 7 codes)."""

    def __init__(
        self,
        model: SNAC,
        left_context_frames: int = 3,
        lookahead_frames: int = 2,
        chunk_frames: int = 4,
        first_chunk_frames: int = 1,
        large_chunk_frames: int = 8,
        chunk_ramp: float = 1.0,
    ):
        if model.attn_window_size is not None:
            raise ValueError(
                "SnacDetokenizer needs a SNAC without local attention (attn_window_size null, as "
                "snac_24khz): windowed attention depends on where a window starts, so streamed "
                "audio could not equal the whole decode"
            )
        strides = [int(s) for s in model.vq_strides]
        if strides != [4, 2, 1]:
            raise ValueError(
                f"SnacDetokenizer needs vq_strides [4, 2, 1] (snac_24khz), got {strides}"
            )
        for name, value, least in (
            ("left_context_frames", left_context_frames, 0),
            ("lookahead_frames", lookahead_frames, 0),
            ("chunk_frames", chunk_frames, 1),
            ("first_chunk_frames", first_chunk_frames, 1),
            ("large_chunk_frames", large_chunk_frames, chunk_frames),
        ):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if not 0 < chunk_ramp <= 1:
            raise ValueError(f"snac chunk_ramp must be in (0, 1], got {chunk_ramp!r}")
        self.model = model.eval()
        self.noise = install_positional_noise(model)
        fold_weight_norm(model)
        self.left = left_context_frames
        self.right = lookahead_frames
        self.chunk = chunk_frames
        self.first_chunk = first_chunk_frames
        # When this many steady frames (and their look-ahead) are in, they go out as one window:
        # a window pays for its L + R context frames, so 8 frames in one window of 13 cost
        # ~28 % less a frame than two windows of 9 (bench/snac_cost.py). The engine lets a
        # stream with a comfortable buffer wait for them (ModelFacts.large_chunk_tokens).
        self.large_chunk = large_chunk_frames
        # Past the first chunk, a chunk holds at most this share of the audio already out (whole
        # frames, rounded up): 1 lets a chunk match it (1, 1, 2, 4 …), less keeps a young
        # stream's chunks smaller than its buffer (0.75: 1, 1, 2, 3, 4 …), for when making a
        # frame takes nearly a frame's playback (a loaded GPU's turns).
        self.chunk_ramp = chunk_ramp
        self.latent_per_frame = strides[0]  # 4 latent steps of 512 samples
        self.device = next(model.parameters()).device
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran
        self.stateful: StreamingSnacDecoder | None = None  # enable_streaming
        self._stream_lengths: list[int] = []  # the stateful calls' captured lengths, longest first

    def enable_streaming(self) -> None:
        """Decode with carried state instead of windows (models/codecs/snac_streaming.py):
        each frame is decoded once, exactly as the whole decode has it, and the chunk schedule
        is the windows' own; a chunk's audio comes out `delay_samples` - R frames (661
        samples, 28 ms) shorter, the rest with the next chunk. Call before
        enable_cuda_graphs."""
        self.stateful = StreamingSnacDecoder(self.model)

    @property
    def samples_per_frame(self) -> int:
        return int(self.model.hop_length) * self.latent_per_frame

    @property
    def sample_rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def flush_frames(self) -> int:
        """Stateful decoding: frames past a stream's end that bring out its last samples."""
        assert self.stateful is not None
        return math.ceil(self.stateful.delay_samples / self.samples_per_frame)

    @property
    def first_audio_frames(self) -> int:
        """Frames a stream must have before its first (non-final) audio comes out."""
        return self.first_chunk + self.right

    def new_stream(self, seed: int = 0) -> SnacStream:
        """A fresh stream; `seed` picks its noise (only the low 32 bits matter)."""
        return SnacStream(seed=seed % 2**32)

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

    def frames_ready(self, stream: SnacStream, final: bool) -> int:
        """Frames decode(…) would emit now: whole chunks with full lookahead, or, when final,
        everything left."""
        chunks = self._chunks(stream, final)
        return chunks[-1][1] - stream.emitted if chunks else 0

    def would_emit(self, stream: SnacStream, new_frames: int) -> bool:
        """Whether a (non-final) decode would emit audio once `new_frames` more frames are
        pushed: past its first chunks a stream emits whole chunks only, so one or two new
        frames may give nothing yet."""
        return bool(self._chunk_plan(stream.emitted, stream.total + new_frames, final=False))

    def _chunks(self, stream: SnacStream, final: bool) -> list[tuple[int, int]]:
        return self._chunk_plan(stream.emitted, stream.total, final)

    def _chunk_plan(self, emitted: int, total: int, final: bool) -> list[tuple[int, int]]:
        """[start, end) of each chunk emittable from a stream that has emitted `emitted` of
        its `total` frames. Chunk lengths ramp from first_chunk_frames up to chunk_frames, each
        at most `chunk_ramp` of the audio already out: early chunks stay small while the
        listener's buffer is small, later ones amortise the window's context overhead; a
        steady chunk is large_chunk_frames whenever that many frames are ready."""
        chunks, start = [], emitted
        while start < total:
            if start == 0:
                size = self.first_chunk
            else:  # at most chunk_ramp of the frames out, rounded up (the float's error aside)
                ramped = math.ceil(self.chunk_ramp * start - 1e-9)
                size = min(self.chunk, max(self.first_chunk, ramped))
            if size == self.chunk and start + self.large_chunk + self.right <= total:
                size = self.large_chunk
            end = start + size
            if end + self.right > total:
                if not final:
                    break  # wait for the lookahead frames
                end = min(end, total)  # the whole decode has no more right context either
            chunks.append((start, end))
            start = end
        return chunks

    def decode(self, streams: list[SnacStream], final: list[bool]) -> list[np.ndarray]:
        """Emit each stream's newly ready audio (float32 mono, possibly empty) and advance it.
        Work is cut into chunk-sized windows; windows of equal length share one decoder call."""
        if len(streams) != len(final):
            raise ValueError(f"got {len(streams)} streams but {len(final)} final flags")
        if self.stateful is not None:
            return self._decode_stateful(streams, final)
        windows = [
            _Window(i, start, end, max(0, start - self.left), min(s.total, end + self.right))
            for i, (s, f) in enumerate(zip(streams, final, strict=True))
            for start, end in self._chunks(s, f)
        ]
        by_length: dict[int, list[_Window]] = {}
        for w in windows:
            by_length.setdefault(w.hi - w.lo, []).append(w)
        pieces: dict[_Window, np.ndarray] = {}
        for group in by_length.values():
            pieces.update(zip(group, self._decode_group(streams, group), strict=True))
        out = []
        for i, (stream, fin) in enumerate(zip(streams, final, strict=True)):
            mine = [w for w in windows if w.row == i]
            out.append(
                np.concatenate([pieces[w] for w in mine]) if mine else np.zeros(0, np.float32)
            )
            stream.emitted = mine[-1].end if mine else stream.emitted
            stream.finished = stream.finished or fin
            stream.forget_before(stream.emitted - self.left)  # the next window's left context
        return out

    @torch.inference_mode()
    def _decode_group(self, streams: list[SnacStream], group: list[_Window]) -> list[np.ndarray]:
        """One SNAC.decode over windows of equal length; returns each window's emitted samples."""
        frames = np.stack([streams[w.row].window(w.lo, w.hi) for w in group])  # [B, T, 7]
        offsets = np.array([w.lo * self.latent_per_frame for w in group], dtype=np.int64)
        seeds = np.array([streams[w.row].seed for w in group], dtype=np.int64)
        n, length = len(group), frames.shape[1]
        bucket = self._graph_bucket(n, length)
        if bucket is not None:  # pad with copies of row 0 up to the captured batch size
            pad = [0] * (bucket - n)
            frames, offsets, seeds = (np.concatenate([a, a[pad]]) for a in (frames, offsets, seeds))
        inputs = [
            torch.from_numpy(a).to(self.device, non_blocking=True) for a in (frames, offsets, seeds)
        ]
        if bucket is not None:
            audio = self.graphs.run(("snac", bucket, length), self._decode_codes, inputs)[:n]
        else:
            audio = self._decode_codes(*inputs)
        audio = audio.float().cpu().numpy()
        spf = self.samples_per_frame
        return [
            a[(w.start - w.lo) * spf : (w.end - w.lo) * spf]
            for a, w in zip(audio, group, strict=True)
        ]

    def _decode_codes(
        self, frames: torch.Tensor, offsets: torch.Tensor, seeds: torch.Tensor
    ) -> torch.Tensor:
        """frames [B, T, 7] → audio [B, T * samples_per_frame]; traceable into a CUDA graph."""
        b = frames.shape[0]
        levels = [frames[:, :, 0], frames[:, :, 1:3], frames[:, :, 3:7]]  # [B,T] [B,T,2] [B,T,4]
        levels = [c.reshape(b, -1) for c in levels]  # [B, T] [B, 2T] [B, 4T]
        self.noise.latent_offset, self.noise.seed = offsets, seeds
        try:
            return self.model.decode(levels)[:, 0]
        finally:
            self.noise.latent_offset = self.noise.seed = None

    # --- the stateful decoder ------------------------------------------------------------------
    def _decode_stateful(self, streams: list[SnacStream], final: list[bool]) -> list[np.ndarray]:
        """decode() with carried state: a stream whose chunk [s, e) is due is fed up to frame
        e + R (all it has when final, then flush frames past its end), so chunks come out when
        the windows' would. With graphs, a stream's frames go in pieces of the captured
        lengths, one piece a round (a piece starts from the previous one's state); rows fed
        the same number of frames in a round share a call."""
        pieces: list[list[_Feed]] = []
        for i, (stream, fin) in enumerate(zip(streams, final, strict=True)):
            chunks = self._chunks(stream, fin)
            # A stream's end always flushes: its last samples wait for the decoder's delay
            # even when every chunk is out (no look-ahead frames held back).
            flush = fin and not stream.finished and stream.total > 0
            if not chunks and not flush:
                continue
            emitted = chunks[-1][1] if chunks else stream.emitted
            upto = stream.total if fin else min(stream.total, emitted + self.right)
            pieces.append(self._pieces(_Feed(i, stream.fed, upto, fin, emitted)))
        audio: list[list[np.ndarray]] = [[] for _ in streams]
        for round_ in range(max(map(len, pieces), default=0)):
            feeds: dict[int, list[_Feed]] = {}
            for feed in (p[round_] for p in pieces if round_ < len(p)):
                feeds.setdefault(feed.length(self.flush_frames), []).append(feed)
            for group in feeds.values():
                for feed, piece in zip(group, self._feed_group(streams, group), strict=True):
                    audio[feed.row].append(piece)
        for stream, fin in zip(streams, final, strict=True):
            stream.finished = stream.finished or fin
            stream.forget_before(stream.fed)  # fed frames live on in the state
        return [np.concatenate(a) if a else np.zeros(0, np.float32) for a in audio]

    def _pieces(self, feed: _Feed) -> list[_Feed]:
        """`feed` cut into calls of captured lengths (largest first; a final feed's flush frames
        go last, alone), so no call runs eagerly; without graphs, `feed` itself."""
        if self.graphs is None or not self._stream_lengths:
            return [feed]
        pieces, fed = [], feed.fed
        while fed < feed.upto:
            step = next(n for n in self._stream_lengths if n <= feed.upto - fed)
            pieces.append(_Feed(feed.row, fed, fed + step, False, feed.emitted))
            fed += step
        if feed.final:
            pieces.append(_Feed(feed.row, fed, fed, True, feed.emitted))
        return pieces

    @torch.inference_mode()
    def _feed_group(self, streams: list[SnacStream], group: list[_Feed]) -> list[np.ndarray]:
        """One stateful call over rows fed the same number of frames; returns each row's
        new audio and keeps its new state."""
        assert self.stateful is not None
        length = group[0].length(self.flush_frames)
        frames = np.zeros((len(group), length, 7), dtype=np.int64)  # flush frames: masked out
        for j, feed in enumerate(group):
            frames[j, : feed.upto - feed.fed] = streams[feed.row].window(feed.fed, feed.upto)
        latent_per_frame = self.latent_per_frame
        position = np.array([f.fed * latent_per_frame for f in group], dtype=np.int64)
        end = np.array(
            [f.upto * latent_per_frame if f.final else NO_END for f in group], dtype=np.int64
        )
        seeds = np.array([streams[f.row].seed for f in group], dtype=np.int64)
        n = len(group)
        bucket = self._graph_bucket(n, length, "snac-stream")
        rows = list(range(n)) + [0] * ((bucket or n) - n)  # pad with copies of row 0
        states = [streams[f.row].state for f in group]
        if any(state is None for state in states):  # a stream's first call: zeros
            dtype = next(self.model.parameters()).dtype
            fresh = self.stateful.new_state(1, self.device, dtype)
            states = [fresh if state is None else state for state in states]
        codes, position, end, seeds = (
            torch.from_numpy(a[rows]).to(self.device, non_blocking=True)
            for a in (frames, position, end, seeds)
        )
        inputs = [codes, torch.cat([states[r] for r in rows]), position, end, seeds]
        if bucket is not None:
            audio, new_state = self.graphs.run(
                ("snac-stream", bucket, length), self.stateful.decode_frames, inputs
            )
            new_state = new_state[:n].clone()  # the graph's buffer: the next replay rewrites it
        else:
            audio, new_state = self.stateful.decode_frames(*inputs)
        audio = audio[:n].float().cpu().numpy()
        spf, delay = self.samples_per_frame, self.stateful.delay_samples
        pieces = []
        for j, feed in enumerate(group):
            stream = streams[feed.row]
            stream.state = new_state[j : j + 1]
            stream.fed, stream.emitted = feed.upto, feed.emitted
            first = feed.fed * spf - delay  # absolute position of the call's first sample
            stop = feed.upto * spf - delay if not feed.final else feed.upto * spf
            pieces.append(audio[j, max(0, -first) : stop - first])
        return pieces

    # --- CUDA graphs ------------------------------------------------------------------------------
    # The window lengths of the chunk schedule (1, 1, 2, 8, 8 … frames with their context, and
    # 4 for a listener that cannot wait for 8) are captured at these batch sizes; other shapes
    # (final flushes, jobs of more rows) run eagerly. A job is padded up to the next size with
    # copies of its first row, and SNAC is compute-bound from a few rows on (on the H200 a
    # 13-frame window costs 2.8 ms at 4 rows, 9.5 ms at 16), so a padded row costs about what
    # a real one does: hence every size up to 8, where the capacity edge's jobs are (4-9 rows),
    # and steps of an eighth or less above it.
    GRAPH_BATCHES = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)

    def enable_cuda_graphs(self, graphs) -> None:
        """Capture the steady-state window shapes with the engine's CallableGraphs, the
        decoder's residual units compiled first when the graphs compile
        (ModelFacts.compile_codec: --compile-codec)."""
        self.graphs = graphs
        if self.stateful is not None:
            self._capture_stateful(graphs)
            return
        graphs.compile_regions(self.repeated_blocks())
        steady = self.left + self.chunk + self.right  # a 4-frame chunk when no more are in
        lengths = sorted({hi - lo for lo, hi in self._schedule_windows(12)} | {steady})
        with torch.inference_mode():
            for batch in self.GRAPH_BATCHES:
                for length in lengths:
                    inputs = [
                        torch.zeros(batch, length, 7, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                    ]
                    graphs.capture(("snac", batch, length), self._decode_codes, inputs)

    def _capture_stateful(self, graphs) -> None:
        """The stateful calls of the chunk schedule (the first feeds its chunk and the R
        look-ahead frames, later ones a chunk each) at GRAPH_BATCHES, the residual units'
        steps compiled first (as the windows' units are); one state buffer a batch size
        serves all its lengths."""
        assert self.stateful is not None
        graphs.compile_regions(self.stateful.repeated_blocks())
        chunks = [(s, e) for s, e in self._schedule_chunks(12)]
        # The schedule's calls, a stream's flush alone, and 1 (so any backlog splits into
        # captured pieces: _pieces).
        lengths = sorted(
            {chunks[0][1] + self.right, self.chunk, self.flush_frames, 1}
            | {e - s for s, e in chunks[1:]}
        )
        self._stream_lengths = sorted(lengths, reverse=True)
        dtype = next(self.model.parameters()).dtype
        with torch.inference_mode():
            for batch in self.GRAPH_BATCHES:
                state = self.stateful.new_state(batch, self.device, dtype)
                for length in lengths:
                    inputs = [
                        torch.zeros(batch, length, 7, dtype=torch.int64, device=self.device),
                        state,
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                        torch.full((batch,), NO_END, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                    ]
                    key = ("snac-stream", batch, length)
                    graphs.capture(key, self.stateful.decode_frames, inputs, borrow=(1,))

    def repeated_blocks(self) -> list[torch.nn.Module]:
        """The decoder's residual units (three per upsampling block: two Snake activations, a
        depthwise and a pointwise conv, a residual add): what --compile-codec compiles,
        block by block (cuda_graphs.compile_regions; units of one width and dilation share a
        program), so each replay holds fused kernels for the Snakes' elementwise passes."""
        from snac.layers import ResidualUnit

        return [m for m in self.model.decoder.modules() if isinstance(m, ResidualUnit)]

    def _schedule_windows(self, n_chunks: int) -> list[tuple[int, int]]:
        """(lo, hi) of the first n_chunks non-final windows of a long stream."""
        return [
            (max(0, start - self.left), end + self.right)
            for start, end in self._schedule_chunks(n_chunks)
        ]

    def _schedule_chunks(self, n_chunks: int) -> list[tuple[int, int]]:
        """[start, end) of the first n_chunks non-final chunks of a long stream."""
        stream = SnacStream(frames=np.zeros((10_000, 7), dtype=np.int64))
        return self._chunks(stream, final=False)[:n_chunks]

    def _graph_bucket(self, n: int, length: int, kind: str = "snac") -> int | None:
        if self.graphs is None:
            return None
        bucket = next((b for b in self.GRAPH_BATCHES if b >= n), None)
        return bucket if bucket is not None and (kind, bucket, length) in self.graphs else None
