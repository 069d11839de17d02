"""DAC 44.1 kHz (descript/dac_44khz, transformers' DacModel) as a streaming detokenizer.

A frame is 9 codes and decodes to 512 samples. DAC's decoder is all symmetric convolutions, so
a sample depends on frames on both sides of it: to emit frames [s, e) the decoder runs on
frames [max(0, s - L), min(n, e + R)) and the samples of [s, e) are cut out. A stream's first
window starts at frame 0 and its final one ends at its last frame, exactly the edges a whole
decode sees; at an interior seam the window must reach every frame an emitted sample depends
on. The decoder's receptive field (latent conv k7, then per upsampling block a transposed conv
and residual units k7 dilated 1/3/9) spans 9.3 frames either side of a frame (measured on
weights whose audio follows the codes: changing one frame changes samples from 9.3 frames
before it to 9.3 after, by over 1e-3 of the peak at the edges), so L = R = 10 make chunked
output equal the whole decode to float rounding (tests/models/test_dac_stream.py; with 8, the
seams were off by up to a third of the signal's peak). R is time to first audio: 10 frames,
116 ms.

On a GPU (`enable_cuda_graphs`) a job's windows replay from CUDA graphs: each stream's frames
to emit are cut on its chunk grid (the first chunk, then whole chunks), each piece with its
own context, so nearly every window has one of three lengths (a first chunk's, a second's,
whose left context is cut at frame 0, and a steady chunk's); windows of a length decode in
one call, their rows padded up to a bucket (more than the largest in several calls). A window
of another length — a stream's last, which ends at its last frame — starts further back, at a
captured length, where the stream has the frames: more left context leaves the samples it
emits as they were (the receptive field is inside it already). Only a stream shorter than the
smallest window that fits runs its last window eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.audible_weights import scale_output, unit_gain_convs
from models.device_util import download, upload

CONTEXT_FRAMES = 10
# Rows a captured call takes (more go in several calls).
GRAPH_ROWS = (1, 2, 4, 8, 16, 32)
# What random weights' audio spreads by before DAC's final tanh (make_audible).
RANDOM_OUTPUT_STD = 0.3


@dataclass
class DacStream:
    frames: list[list[int]] = field(default_factory=list)  # [n][codebooks]
    emitted: int = 0  # frames whose audio has been returned


def load_dac(folder: Path, device: torch.device):
    """transformers' DacModel from a folder in its layout (config.json + model.safetensors)."""
    try:
        from transformers import DacModel
    except ImportError:
        raise CheckpointError(
            "the DAC codec needs transformers (pip install 'voxgate[zonos]')"
        ) from None
    try:
        model = DacModel.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"could not load the DAC codec from {folder}: {exc}") from None
    return model.to(device).eval()


def make_audible(dac, seed: int):
    """A DacModel's decoder and quantizer projections redrawn so that random weights make
    audio that follows the codes (models/codecs/audible_weights.py); returns `dac`."""
    g = torch.Generator().manual_seed(seed)
    unit_gain_convs(dac.decoder, g)
    unit_gain_convs(dac.quantizer, g)
    cfg = dac.config
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.n_codebooks, 64), generator=g)
    scale_output(
        dac.decoder.conv2,
        lambda: dac.decoder(dac.quantizer.from_codes(codes)[0]),
        RANDOM_OUTPUT_STD,
    )
    return dac


class DacDetokenizer:
    def __init__(
        self,
        dac,  # transformers.DacModel
        first_chunk: int = 4,
        chunk: int = 16,
        left: int = CONTEXT_FRAMES,
        right: int = CONTEXT_FRAMES,
    ) -> None:
        self.dac = dac
        self.num_codebooks = int(dac.config.n_codebooks)
        self.codebook_size = int(dac.config.codebook_size)
        self.sample_rate = int(dac.config.sampling_rate)
        self.samples_per_frame = int(np.prod(dac.config.upsampling_ratios))
        self.first_chunk, self.chunk, self.left, self.right = first_chunk, chunk, left, right
        self.graphs = None  # the engine's CallableGraphs, once enable_cuda_graphs captured them
        self.graph_lengths: tuple[int, ...] = ()  # the window lengths captured

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    def new_stream(self) -> DacStream:
        return DacStream()

    def push(self, stream: DacStream, frames: list[list[int]]) -> None:
        for codes in frames:
            if len(codes) != self.num_codebooks or not all(
                0 <= c < self.codebook_size for c in codes
            ):
                raise ValueError(f"a DAC frame is {self.num_codebooks} codes in [0, 1024)")
            stream.frames.append(list(codes))

    def decode(self, streams: list[DacStream], final: list[bool]) -> list[np.ndarray]:
        """The audio each stream can emit now: every frame whose right context has arrived
        (all of them with `final`). Windows of the same length decode as one batch."""
        groups: dict[int, list[tuple[int, int, int, int]]] = {}
        for i, (stream, last) in enumerate(zip(streams, final, strict=True)):
            n, start = len(stream.frames), stream.emitted
            end = n if last else n - self.right
            for s, e in self._pieces(start, end):
                hi = min(n, e + self.right)
                lo = self._window_start(max(0, s - self.left), hi)
                groups.setdefault(hi - lo, []).append((i, lo, s, e))
            stream.emitted = max(start, end)
        hop = self.samples_per_frame
        parts: list[list[tuple[int, np.ndarray]]] = [[] for _ in streams]
        for length, members in groups.items():
            windows = [streams[i].frames[lo : lo + length] for i, lo, _, _ in members]
            audio = self.decode_windows(windows)
            for row, (i, lo, s, e) in zip(audio, members, strict=True):
                parts[i].append((s, row[(s - lo) * hop : (e - lo) * hop]))
        return [
            np.concatenate([a for _, a in sorted(p, key=lambda x: x[0])])
            if p
            else np.zeros(0, dtype=np.float32)
            for p in parts
        ]

    def _pieces(self, start: int, end: int) -> list[tuple[int, int]]:
        """[start, end) as one piece, or with graphs cut on the stream's chunk grid (the
        first chunk, then whole chunks), so that its windows have the captured lengths."""
        if end <= start:
            return []
        if self.graphs is None:
            return [(start, end)]
        cuts = [start]
        grid = self.first_chunk
        while grid < end:
            if grid > start:
                cuts.append(grid)
            grid += self.chunk
        return list(zip(cuts, [*cuts[1:], end], strict=True))

    def _window_start(self, lo: int, hi: int) -> int:
        """Where the window [lo, hi) starts: with graphs, moved back to the shortest captured
        length that holds it, if the stream has the frames before it (it replays then)."""
        if self.graphs is None:
            return lo
        fits = [length for length in self.graph_lengths if hi - lo <= length <= hi]
        return hi - min(fits) if fits else lo

    def decode_frames(self, frames: list[list[int]]) -> np.ndarray:
        """Frames [n][codebooks] → float32 mono samples [n · 512], decoded at once."""
        return self.decode_windows([frames])[0]

    @torch.inference_mode()
    def decode_windows(self, windows: list[list[list[int]]]) -> np.ndarray:
        """Windows of equal length [B][n][codebooks] → float32 samples [B, n · 512]; from a
        graph when one was captured for the length, rows padded up to its bucket."""
        device = next(self.dac.parameters()).device
        real, length, top = len(windows), len(windows[0]), GRAPH_ROWS[-1]
        if self.graphs is not None and real > top:  # in calls of the largest bucket
            parts = [self.decode_windows(windows[i : i + top]) for i in range(0, real, top)]
            return np.concatenate(parts)
        batch = next((b for b in GRAPH_ROWS if b >= real), real)
        key = ("dac", batch, length)
        if self.graphs is None or key not in self.graphs:
            codes = upload(windows, torch.long, device).transpose(1, 2)
            return download(self.decode_codes(codes))
        silent = [[[0] * self.num_codebooks] * length] * (batch - real)
        codes = upload(windows + silent, torch.long, device).transpose(1, 2)
        return download(self.graphs.run(key, self.decode_codes, [codes])[:real])

    def decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, codebooks, n] → float32 samples [B, n · 512]."""
        latent = self.dac.quantizer.from_codes(codes)[0]  # [B, hidden, n]
        return self.dac.decoder(latent)[:, 0].float()  # [B, n · hop]

    def window_lengths(self) -> list[int]:
        """The lengths of a stream's windows before its last: its first chunk's, its second's
        (left context cut at frame 0 while the first chunk is shorter than it), a steady one's."""
        first = self.first_chunk + self.right
        second = min(self.first_chunk, self.left) + self.chunk + self.right
        return sorted({first, second, self.left + self.chunk + self.right}, reverse=True)

    @torch.inference_mode()
    def enable_cuda_graphs(self, graphs) -> None:
        """Capture the decode of every window length a stream's chunks take (window_lengths)
        at GRAPH_ROWS with the engine's CallableGraphs (largest first, so the smaller ones
        reuse its pool's memory)."""
        self.graphs = graphs
        self.graph_lengths = tuple(self.window_lengths())
        device = next(self.dac.parameters()).device
        for rows in reversed(GRAPH_ROWS):
            for length in self.graph_lengths:
                codes = torch.zeros(
                    rows, self.num_codebooks, length, dtype=torch.long, device=device
                )
                graphs.capture(("dac", rows, length), self.decode_codes, [codes])
