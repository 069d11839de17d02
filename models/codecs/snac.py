"""SNAC 24 kHz (hubertsiuzdak/snac_24khz) as a batched, streaming detokenizer.

The architecture is the `snac` package's `SNAC`; snac_checkpoint loads and saves it in the
published layout, snac_noise makes its decoder's noise deterministic, snac_streaming runs its
decoder with each conv's state carried from one call to the next, snac_plan says which frames
come out as audio when (chunks ramping 1, 1, 2, 4, then 8, each due once its 2 look-ahead frames
are in), and this module follows that plan for each request and batches the streams' calls. A
frame is 7 codes in SNAC hierarchical order `[l0, l1a, l1b, l2a, l2b, l2c, l2d]` (one level-0,
two level-1, four level-2 codes) and decodes to 2048 samples (4 latent steps of 512). Orpheus
interleaves its 7 tokens differently; reordering them is the Orpheus model's job. A chunk's
audio comes out 661 samples (28 ms) short (the decoder's delay, 4,757 samples, less the
look-ahead's), which follow with the next chunk, and a stream's end flushes the rest. Each frame
is decoded once, and a stream's audio equals one whole decode of its frames (float rounding:
~1e-6 of its RMS).

Decoding each chunk again in a window with L + R context frames (3 + 2: 8 frames cost 13, 4
cost 9) was the alternative. Beside it this decoder costs 2-8 % less a frame alone in 8-frame
calls and 7-30 % in 4-frame ones (docs/benchmark-history.md, `bench/snac_cost.py`), has no
seam error, and served 192 Orpheus listeners on an H200 with 99.70 / 83.63 / 100.00 / 98.59 %
of frames on time where the windows kept 69.80 / 65.07 / 64.67 / 85.43 % (ABBA over two calls).
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
from models.codecs.snac_plan import SnacChunkPlan
from models.codecs.snac_streaming import NO_END, StreamingSnacDecoder
from models.device_util import download, gemms_in_conv_precision, upload

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
    """One request's detokenizer state. Frames are dropped once fed (they live on in the
    decoder's state), so memory stays bounded however long the utterance."""

    seed: int = 0  # noise seed (PositionalNoise)
    frames: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), dtype=np.int64))  # [N, 7]
    base: int = 0  # absolute index of frames[0]
    emitted: int = 0  # frames whose chunk has been returned (less the decoder's delay)
    finished: bool = False  # final flush done; no more frames accepted
    fed: int = 0  # frames fed to the stateful decoder so far
    # Its per-conv state for this stream (None before the first call).
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

    def frames_in(self, lo: int, hi: int) -> np.ndarray:
        """Frames [lo, hi) by absolute index: [hi - lo, 7]."""
        return self.frames[lo - self.base : hi - self.base]


@dataclass(frozen=True)
class _Feed:
    """One stream's part of a decoder call (SnacDetokenizer.decode)."""

    row: int  # index into the streams of this decode call
    fed: int  # frames fed before this call
    upto: int  # frames fed after it
    final: bool  # the stream ends here: flush frames follow its last
    emitted: int  # the chunk plan's emitted frames after it

    def length(self, flush_frames: int) -> int:
        """Frames in the call: the new ones, and the flush at the end."""
        return self.upto - self.fed + (flush_frames if self.final else 0)


class SnacDetokenizer:
    """Turns per-request SNAC frames into audio chunks: plans each stream's chunks and feeds
    the stateful decoder, rows fed the same number of frames sharing one call. Settings are in
    frames (2048 samples, 7 codes)."""

    def __init__(
        self,
        model: SNAC,
        lookahead_frames: int = 2,
        chunk_frames: int = 4,
        first_chunk_frames: int = 1,
        large_chunk_frames: int = 8,
        chunk_ramp: float = 1.0,
    ):
        if model.attn_window_size is not None:
            raise ValueError(
                "SnacDetokenizer needs a SNAC without local attention (attn_window_size null, as "
                "snac_24khz): windowed attention depends on where a call starts, so streamed "
                "audio could not equal the whole decode"
            )
        strides = [int(s) for s in model.vq_strides]
        if strides != [4, 2, 1]:
            raise ValueError(
                f"SnacDetokenizer needs vq_strides [4, 2, 1] (snac_24khz), got {strides}"
            )
        # Which frames come out as audio when; Orpheus' serving options replace it
        # (models/orpheus/serving_options.py: the large chunk, the ramp).
        self.plan = SnacChunkPlan(
            lookahead_frames, chunk_frames, first_chunk_frames, large_chunk_frames, chunk_ramp
        )
        self.model = model.eval()
        self.noise = install_positional_noise(model)
        fold_weight_norm(model)
        self.decoder = StreamingSnacDecoder(model)  # SNAC's decoder, stepped with its state
        self.latent_per_frame = strides[0]  # 4 latent steps of 512 samples
        self.device = next(model.parameters()).device
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran
        self._graph_lengths: list[int] = []  # the calls' captured lengths, longest first

    @property
    def samples_per_frame(self) -> int:
        return int(self.model.hop_length) * self.latent_per_frame

    @property
    def sample_rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def flush_frames(self) -> int:
        """Frames past a stream's end that bring out its last samples."""
        return math.ceil(self.decoder.delay_samples / self.samples_per_frame)

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
        """Frames whose chunks decode(…) would complete now: whole chunks with full lookahead,
        or, when final, everything left."""
        chunks = self._chunks(stream, final)
        return chunks[-1][1] - stream.emitted if chunks else 0

    def would_emit(self, stream: SnacStream, new_frames: int, hurry: bool = False) -> bool:
        """Whether a (non-final) decode would emit audio once `new_frames` more frames are
        pushed (SnacChunkPlan.would_emit)."""
        return self.plan.would_emit(stream.emitted, stream.total, new_frames, hurry)

    def _chunks(
        self, stream: SnacStream, final: bool, hurry: bool = False
    ) -> list[tuple[int, int]]:
        return self.plan.chunks(stream.emitted, stream.total, final, hurry)

    def decode(
        self, streams: list[SnacStream], final: list[bool], hurry: list[bool] | None = None
    ) -> list[np.ndarray]:
        """Emit each stream's newly ready audio (float32 mono, possibly empty) and advance it:
        a stream whose chunk [s, e) is due is fed up to frame e + R (all it has when final,
        then flush frames past its end); one in a `hurry` emits every frame past its
        look-ahead (SnacChunkPlan.chunks). With graphs, a stream's frames go in pieces of the
        captured lengths, one piece a round (a piece starts from the previous one's state);
        rows fed the same number of frames in a round share a call."""
        hurry = hurry or [False] * len(streams)
        pieces: list[list[_Feed]] = []
        for i, (stream, fin, rush) in enumerate(zip(streams, final, hurry, strict=True)):
            chunks = self._chunks(stream, fin, rush)
            # A stream's end always flushes: its last samples wait for the decoder's delay
            # even when every chunk is out (no look-ahead frames held back).
            flush = fin and not stream.finished and stream.total > 0
            if not chunks and not flush:
                continue
            emitted = chunks[-1][1] if chunks else stream.emitted
            upto = stream.total if fin else min(stream.total, emitted + self.plan.lookahead_frames)
            pieces.append(self._pieces(_Feed(i, stream.fed, upto, fin, emitted)))
        audio: list[list[np.ndarray]] = [[] for _ in streams]
        for round_ in range(max(map(len, pieces), default=0)):
            feeds: dict[int, list[_Feed]] = {}
            for feed in (p[round_] for p in pieces if round_ < len(p)):
                feeds.setdefault(feed.length(self.flush_frames), []).append(feed)
            for group in feeds.values():
                for part in self._row_parts(group):
                    for feed, piece in zip(part, self._feed_group(streams, part), strict=True):
                        audio[feed.row].append(piece)
        for stream, fin in zip(streams, final, strict=True):
            stream.finished = stream.finished or fin
            stream.forget_before(stream.fed)  # fed frames live on in the state
        return [np.concatenate(a) if a else np.zeros(0, np.float32) for a in audio]

    def _row_parts(self, group: list[_Feed]) -> list[list[_Feed]]:
        """With graphs, a group of more rows than the largest captured batch in calls of that
        batch (replays launch a few ops from the host where an eager call of hundreds of rows
        launches every kernel, holding the GIL the engine's loop needs); else the group."""
        top = self.GRAPH_BATCHES[-1]
        if self.graphs is None or len(group) <= top:
            return [group]
        return [group[i : i + top] for i in range(0, len(group), top)]

    def _pieces(self, feed: _Feed) -> list[_Feed]:
        """`feed` cut into calls of captured lengths (largest first; a final feed's flush frames
        go last, alone), so no call runs eagerly; without graphs, `feed` itself."""
        if not self._graph_lengths:  # set with the graphs (enable_cuda_graphs)
            return [feed]
        pieces, fed = [], feed.fed
        while fed < feed.upto:
            step = next(n for n in self._graph_lengths if n <= feed.upto - fed)
            pieces.append(_Feed(feed.row, fed, fed + step, False, feed.emitted))
            fed += step
        if feed.final:
            pieces.append(_Feed(feed.row, fed, fed, True, feed.emitted))
        return pieces

    @torch.inference_mode()
    def _feed_group(self, streams: list[SnacStream], group: list[_Feed]) -> list[np.ndarray]:
        """One decoder call over rows fed the same number of frames; returns each row's new
        audio and keeps its new state."""
        length = group[0].length(self.flush_frames)
        frames = np.zeros((len(group), length, 7), dtype=np.int64)  # flush frames: masked out
        for j, feed in enumerate(group):
            frames[j, : feed.upto - feed.fed] = streams[feed.row].frames_in(feed.fed, feed.upto)
        latent_per_frame = self.latent_per_frame
        position = np.array([f.fed * latent_per_frame for f in group], dtype=np.int64)
        end = np.array(
            [f.upto * latent_per_frame if f.final else NO_END for f in group], dtype=np.int64
        )
        seeds = np.array([streams[f.row].seed for f in group], dtype=np.int64)
        n = len(group)
        bucket = self._graph_bucket(n, length)
        rows = list(range(n)) + [0] * ((bucket or n) - n)  # pad with copies of row 0
        states = [streams[f.row].state for f in group]
        if any(state is None for state in states):  # a stream's first call: zeros
            dtype = next(self.model.parameters()).dtype
            fresh = self.decoder.new_state(1, self.device, dtype)
            states = [fresh if state is None else state for state in states]
        codes, position, end, seeds = (
            upload(a[rows], torch.long, self.device) for a in (frames, position, end, seeds)
        )
        inputs = [codes, torch.cat([states[r] for r in rows]), position, end, seeds]
        if bucket is not None:
            audio, new_state = self.graphs.run(
                ("snac", bucket, length), self.decoder.decode_frames, inputs
            )
            new_state = new_state[:n].clone()  # the graph's buffer: the next replay rewrites it
        else:
            audio, new_state = self.decoder.decode_frames(*inputs)
        audio = download(audio[:n].float())  # waits for this thread's stream alone
        spf, delay = self.samples_per_frame, self.decoder.delay_samples
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
    # The chunk schedule's call lengths are captured at these batch sizes; a group of more rows
    # goes in calls of the largest (_row_parts). A call is padded up to the next size with copies of its first row, and SNAC
    # is compute-bound from a few rows on (on the H200 a 4-frame call costs 1.8 ms at 4 rows,
    # 4.3 ms at 16), so a padded row costs about what a real one does: hence every size up to
    # 8, where the capacity edge's calls are (5-7 rows), and steps of an eighth or less above.
    # None of 1: a lone row goes in the 2-row graph. The compiled blocks' programs take any
    # batch but 1, which dynamo specialises (its 0/1 rule), so a 1-row capture would compile
    # every program a second time at start-up (on the CPU, 4 of them: 50 s), for a call that
    # costs about what 2 rows do.
    GRAPH_BATCHES = (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)

    def enable_cuda_graphs(self, graphs) -> None:
        """Capture the calls of the chunk schedule (the first feeds its chunk and the R
        look-ahead frames, later ones a chunk each; a stream's flush alone; and 1 frame, so any
        backlog cuts into captured pieces: _pieces) at GRAPH_BATCHES with the engine's
        CallableGraphs. On CUDA hand-written Triton kernels run the residual units, the Snakes
        with the convs after them and the upsamplings with their noise in them
        (models/codecs/snac_triton.py; the residual units' 28 % less GPU time a frame than
        Inductor's blocks, docs/models.md); the other repeated steps (the input and output
        convs) are compiled first when the graphs compile (ModelFacts.compile_codec:
        --compile-codec). One state buffer a batch size serves all its lengths."""
        self.graphs = graphs
        dtype = next(self.model.parameters()).dtype
        if dtype == torch.float32:
            gemms_in_conv_precision()
        if self.device.type == "cuda":
            self.decoder.use_triton_kernels()
        graphs.compile_regions(self.repeated_blocks())
        chunks = self.plan.schedule(12)
        plan = self.plan
        lengths = {chunks[0][1] + plan.lookahead_frames, plan.chunk_frames, self.flush_frames, 1}
        lengths |= {e - s for s, e in chunks[1:]}
        self._graph_lengths = sorted(lengths, reverse=True)
        with torch.inference_mode():
            # Largest first: the Triton kernels tune their tiles at their first call of each
            # size class (snac_triton.SMALL_CALL_ROWS), which should be its largest (64 rows;
            # 8), not one of 2.
            for batch in reversed(self.GRAPH_BATCHES):
                state = self.decoder.new_state(batch, self.device, dtype)
                for length in self._graph_lengths:
                    inputs = [
                        torch.zeros(batch, length, 7, dtype=torch.int64, device=self.device),
                        state,
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                        torch.full((batch,), NO_END, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                    ]
                    key = ("snac", batch, length)
                    graphs.capture(key, self.decoder.decode_frames, inputs, borrow=(1,))

    def repeated_blocks(self) -> list[torch.nn.Module]:
        """The decoder's two symmetric convs (the latent's depthwise one and the output
        conv, each with its mask and kept inputs), its upsampling steps (one per block: a
        mask, the kept step, the transposed conv's GEMM and overlap-add), noise steps (one
        per block: the positional noise's hash and Box-Muller, a pointwise conv, an add) and
        residual units' steps (three per block: two Snake activations, a dilated and a
        pointwise conv, a residual add, and their state): what --compile-codec compiles,
        block by block (cuda_graphs.compile_regions; units of one width and dilation share a
        program), so each replay holds fused kernels for their elementwise passes. On CUDA
        Triton kernels run all but the two symmetric convs (StreamingSnacDecoder.
        repeated_blocks)."""
        return self.decoder.repeated_blocks()

    def _graph_bucket(self, n: int, length: int) -> int | None:
        if self.graphs is None:
            return None
        bucket = next((b for b in self.GRAPH_BATCHES if b >= n), None)
        return bucket if bucket is not None and ("snac", bucket, length) in self.graphs else None
