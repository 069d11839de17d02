"""The 12 Hz speech decoder's streams, batched, and replayed from CUDA graphs on a GPU.

Each stream's decoder state (every causal block's past: conv tails, the sliding window's keys
and values; `SpeechDecoder.state_layout`) is one row of a flat buffer (models/codecs/
slot_states.py's StateSlots with a single entry): a call gathers its streams' rows with one
`index_select`, runs the decoder on views of them, and writes the new state back with one
`index_copy_`. The gather and write-back stay outside the graph, so the buffer may grow (it
doubles when every row is taken) without invalidating a graph: a graph reads a staging buffer
of its own (`borrow`), not the slots.

Streams that bring the same number of frames decode together. With graphs each call is cut
to a captured shape: rows padded up to a bucket (GRAPH_ROWS; more rows than the largest go in
several calls) on the scratch slot, frames in pieces of GRAPH_FRAMES (every block is causal,
so pieces decode exactly as one call would). Without graphs (the CPU) a group is one call of
its real size.

An in-context clone's stream first reads its clip's codes (their audio dropped). Every request
of the voice starts from the state they leave, so it is kept per clip (`PRIMED_STATES`) and
copied into a new stream's row.

The engine's first-chunk lane decodes on a `twin`: the same decoder and the same state slots
(a stream's row is where either context left it), with graphs and a staging buffer of its own
for up to LANE_GRAPH_ROWS[-1] rows a call (models/qwen3_tts/lane.py).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from models.codecs.slot_states import SCRATCH, StateSlots
from models.codecs.stream_batching import PAD_BUCKETS
from models.device_util import download, upload
from models.qwen3_tts.codec import SpeechDecoder

# The shapes captured: rows up to 64 (a job of more goes in several calls), and frames a call:
# a first chunk is 2, a steady chunk 4, a final flush 1-3 (any count is cut into these).
GRAPH_ROWS = tuple(b for b in PAD_BUCKETS if b <= 64)
GRAPH_FRAMES = (4, 2, 1)
# The lane's: first chunks, and chunks whose listener would run dry, a few at a time.
LANE_GRAPH_ROWS = tuple(b for b in PAD_BUCKETS if b <= 8)
# Cloned voices whose clip's decoder state is kept (5.2 MB each at the real shape, float32).
PRIMED_STATES = 32


@dataclass
class CodecStream:
    """One request's decoder stream: the frames decoded so far (its next position), codes to
    decode first with their audio dropped (an in-context clone's clip: the speech continues
    it), and its row in the state slots (None until its first call)."""

    frames: int = 0
    prime: np.ndarray | None = None  # [T, num_quantizers]
    slot: int | None = None


class CodecStreams:
    def __init__(
        self,
        decoder: SpeechDecoder,
        graph_rows: tuple[int, ...] = GRAPH_ROWS,
        slots: StateSlots | None = None,
    ) -> None:
        """`graph_rows`: the row buckets its graphs capture; `slots`: another context's
        state slots to share (`twin`), else its own."""
        self.decoder = decoder.eval()
        self.graph_rows = graph_rows
        param = next(decoder.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.num_quantizers = decoder.cfg.num_quantizers
        layout = decoder.state_layout()
        self._keys = [key for key, _ in layout]
        self._shapes = [shape for _, shape in layout]
        sizes = [math.prod(shape) for shape in self._shapes]
        ends = list(itertools.accumulate(sizes))
        self._bounds = [(end - size, end) for size, end in zip(sizes, ends, strict=True)]
        self.state_size = sum(sizes)
        self.slots = slots or StateSlots(
            [torch.zeros(self.state_size, dtype=self.dtype, device=self.device)]
        )
        self.graphs = None  # the engine's CallableGraphs, once enable_cuda_graphs captured them
        self._staging: dict[int, torch.Tensor] = {}  # rows → the graphs' state input
        # The state each recently used clip leaves (in-context clones' primes), newest last.
        self._primed: collections.OrderedDict[tuple, torch.Tensor] = collections.OrderedDict()

    def twin(self, graph_rows: tuple[int, ...] = LANE_GRAPH_ROWS) -> CodecStreams:
        """A second context over the same decoder and state slots, to run on another thread
        (the engine's first-chunk lane): streams go on in either."""
        return CodecStreams(self.decoder, graph_rows, self.slots)

    def new_stream(self, prime: np.ndarray | None = None) -> CodecStream:
        return CodecStream(prime=prime if prime is not None and len(prime) else None)

    @torch.inference_mode()
    def decode(self, streams: list[CodecStream], frames: list[list[list[int]]]) -> list[np.ndarray]:
        """frames[i]: stream i's new frames (each num_quantizers codes) → its audio (float32,
        1920 samples a frame; empty for none), the streams advanced."""
        out = [np.zeros(0, np.float32) for _ in streams]
        for stream in streams:
            if stream.prime is not None:
                self._prime(stream)
        groups: dict[int, list[int]] = {}
        for i, new in enumerate(frames):
            if new:
                groups.setdefault(len(new), []).append(i)
        for members in groups.values():
            codes = upload([frames[i] for i in members], torch.long, self.device)  # [B, n, K]
            audio = download(self._decode_group([streams[i] for i in members], codes))
            for i, pcm in zip(members, audio, strict=True):
                out[i] = pcm
        return out

    def _prime(self, stream: CodecStream) -> None:
        """Put the stream where its clip's codes leave the decoder, their audio dropped: every
        request of a cloned voice starts from the same state, so it is decoded once (one eager
        call: a clip's length is its own) and copied into later streams' rows."""
        prime, stream.prime = stream.prime, None
        assert prime is not None
        key = (prime.shape, hashlib.blake2b(prime.tobytes(), digest_size=16).digest())
        primed = self._primed.get(key)
        slot = self.slots.bind(stream)
        if primed is not None:
            self._primed.move_to_end(key)
            self.slots.write_row(slot, [primed])
            stream.frames = len(prime)
            return
        self._call([stream], upload(prime, torch.long, self.device)[None], graphed=False)
        self._primed[key] = self.slots.read_row(slot)[0]
        if len(self._primed) > PRIMED_STATES:
            self._primed.popitem(last=False)

    def _decode_group(self, group: list[CodecStream], codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, K] for streams each at its own position → audio [B, n·1920]."""
        if self.graphs is None:
            return self._call(group, codes, graphed=False)
        top, parts = self.graph_rows[-1], []
        for start in range(0, len(group), top):
            rows, pieces, at = slice(start, start + top), [], 0
            for length in _pieces(codes.shape[1]):
                pieces.append(self._call(group[rows], codes[rows, at : at + length]))
                self.graphs.pace()  # the GPU never holds a whole job's kernels ahead of the LLM's
                at += length
            parts.append(torch.cat(pieces, dim=1))
        return torch.cat(parts)

    def _call(self, group: list[CodecStream], codes: torch.Tensor, graphed: bool = True):
        """One decoder call: the group's rows (padded to a captured bucket when `graphed`),
        their state gathered and written back → audio [len(group), n·1920], never a view of a
        graph's buffer."""
        real, frames = len(group), codes.shape[1]
        batch = self._bucket(real) if graphed else real
        pad = batch - real  # rows on the scratch slot, decoded and dropped
        rows = upload(
            [self.slots.bind(s) for s in group] + [SCRATCH] * pad, torch.long, self.device
        )
        starts = upload([s.frames for s in group] + [0] * pad, torch.long, self.device)
        if pad:
            codes = torch.cat([codes, codes.new_zeros(pad, *codes.shape[1:])])
        key = ("qwen3-tts-codec", batch, frames)
        replay = graphed and key in self.graphs
        if replay:
            state = self._staging[batch]
            self.slots.gather_into(rows, [state])
            audio, new = self.graphs.run(key, self.step, [codes, state, starts])
        else:
            audio, new = self.step(codes, self.slots.gather(rows)[0], starts)
        self.slots.scatter(rows, [new])
        for s in group:
            s.frames += frames
        audio = audio[:real].float()
        return audio.clone() if replay else audio  # a replay's buffer: the next one rewrites it

    def _bucket(self, rows: int) -> int:
        return next(b for b in self.graph_rows if b >= rows)

    def step(self, codes: torch.Tensor, state: torch.Tensor, starts: torch.Tensor):
        """codes [B, n, K], state [B, state_size], starts [B] → (audio [B, n·1920], the new
        state [B, state_size]); reads nothing but its inputs, so a CUDA graph can replay it."""
        b = state.shape[0]
        cache = {
            key: state[:, lo:hi].view(b, *shape)
            for key, shape, (lo, hi) in zip(self._keys, self._shapes, self._bounds, strict=True)
        }
        audio = self.decoder.run(codes.transpose(1, 2), starts, cache)
        new = torch.cat([cache[key].reshape(b, -1) for key in self._keys], dim=1)
        return audio, new

    @torch.inference_mode()
    def enable_cuda_graphs(self, graphs) -> None:
        """Capture every (graph_rows, GRAPH_FRAMES) call with the engine's CallableGraphs
        (largest first, so the smaller ones reuse its pool's memory), the decoder's repeated
        blocks compiled first where the graphs compile (SpeechDecoder.repeated_blocks); their
        state input is a view of one staging buffer of the most rows."""
        self.graphs = graphs
        graphs.compile_regions(self.decoder.repeated_blocks())
        # Rows for as many streams as the largest call, taken now, before the engine sizes its
        # KV pool from the memory left; more streams grow the buffer while serving.
        self.slots.size_for(GRAPH_ROWS[-1])
        most = self.graph_rows[-1]
        staging = torch.zeros(most, self.state_size, dtype=self.dtype, device=self.device)
        for rows in reversed(self.graph_rows):
            self._staging[rows] = staging[:rows]
            for frames in GRAPH_FRAMES:
                inputs = [
                    torch.zeros(
                        rows, frames, self.num_quantizers, dtype=torch.long, device=self.device
                    ),
                    self._staging[rows],
                    torch.zeros(rows, dtype=torch.long, device=self.device),
                ]
                graphs.capture(("qwen3-tts-codec", rows, frames), self.step, inputs, borrow=(1,))


def _pieces(frames: int) -> list[int]:
    """`frames` cut greedily into captured lengths."""
    out = []
    for length in GRAPH_FRAMES:
        while frames >= length:
            out.append(length)
            frames -= length
    return out
