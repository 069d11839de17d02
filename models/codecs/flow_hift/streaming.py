"""Streaming flow + HiFT decode with explicit per-request state, batched across requests.

Flow: CosyVoice 2's encoder and estimator attend in chunks (25 tokens / 50 frames) to their
own chunk and every earlier one, and their convolutions are causal apart from the encoder's
3-token look-ahead. So once a chunk's tokens and the 3 after them exist, its mel is final.
CosyVoice's own streaming re-runs encoder and estimator (10 Euler steps x 2 for CFG) over the
whole history for every chunk, so each chunk costs more than the last; per-layer caches for
every ODE step would cost ~1 MB per frame. Here each chunk is one flow row over a bounded
window instead: the voice prompt (its mel as the condition, as in the reference), the last
`context_chunks` generated chunks, the chunk, and its look-ahead tokens. The window's frames are
integrated from their own frame-indexed noise (flow.fixed_noise: a frame starts from the same
noise wherever its row begins) exactly as the reference integrates the history, and only the
chunk's frames are kept. So a chunk's mel is the reference's streaming-mode mel of the
utterance with the history before its window left out; for the first `context_chunks` + 1
chunks it is the reference's exactly. Chunk rows have one shape in steady state (prompt +
(context_chunks + 1) chunks + look-ahead), their cost does not grow with the utterance, and a
whole-utterance decode makes the same rows (chunked == whole). `context_chunks=None` keeps the
reference's unbounded history (one row over everything). Step-Audio 2's flow (a DiT
estimator) streams the same way, with its voice prompt as one chunk of its own and the grid
starting where it ends (FlowConfig.prompt_chunk), as StepFun's setup_cache caches it.

First chunk: `first_hop` tokens (<= the chunk) rather than a whole chunk, for time to first
audio. The chunk grid starts with it: the flow attends to the first hop as a chunk of its own
and to 25-token chunks after it (encoder.chunk_ids), so its mel is final once first_hop + 3
tokens exist, and everything above holds on the shifted grid.

HiFT: hift_stream.HiftStreamer (`left`/`right` frames of context, carried sine phase).

Shapes: flow rows are padded to the batch's longest; HiFT windows are grouped by length
(steady-state windows all have left + chunk + right frames), each group one batched call.

Host cost: a job is one call of `flow_rows` (encoder + solver) and one `vocode_windows` per
HiFT window length, each with fixed shapes and no host syncs, replayed from CUDA graphs at
(rows, frames) buckets once `enable_cuda_graphs` ran (the flow as a "prep" graph and one Euler
step's graph replayed per step, so a paced codec thread can wait between steps). Their
integer inputs are built on the host in one pinned buffer per call and uploaded by one
asynchronous copy; nothing is read back but the audio, once per job.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from models.codecs.flow_hift.flow import NOISE_FRAMES, CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.hift_stream import HiftStreamer, graph_calls, note_eager
from models.codecs.flow_hift.qkv import join_qkv
from models.device_util import gemms_in_conv_precision

log = logging.getLogger("voxgate.flow_hift")

# Generated chunks of history each chunk's flow row carries besides the voice prompt (None:
# the whole history, as CosyVoice's own streaming; cost then grows with the utterance).
DEFAULT_CONTEXT_CHUNKS = 2


@dataclass
class FlowHiftStream:
    prompt_tokens: list[int]  # the voice prompt's speech tokens, a multiple of the chunk
    prompt_mel: torch.Tensor  # [2 * len(prompt_tokens), M]
    speaker: torch.Tensor  # [E] CAM++ x-vector
    tokens: list[int] = field(default_factory=list)  # generated speech codes
    tokens_decoded: int = 0  # generated tokens whose mel is made
    mel: torch.Tensor | None = None  # [M, n] generated frames kept for HiFT, from mel_start
    mel_start: int = 0
    emitted_frames: int = 0  # generated frames already turned into audio
    phase: torch.Tensor | None = None  # [H] float64 sine cycles run before frame emitted_frames

    @property
    def mel_frames(self) -> int:
        return self.mel_start + (0 if self.mel is None else self.mel.shape[1])

    def record_stream(self, stream) -> None:
        """This state's generated mel and phase (made on one CUDA stream) are read on `stream`
        from now on: the allocator must not reuse their memory before that stream is done
        with them (a first-chunk lane hands states over to the steady stream)."""
        for t in (self.mel, self.phase):
            if t is not None and t.device.type == "cuda":
                t.record_stream(stream)


@dataclass
class FlowWindow:
    """One flow row: generated tokens [start, end + lookahead) after the voice prompt; the mel
    of tokens [first, end) is kept (those before `first` are the chunk's context)."""

    state: FlowHiftStream
    start: int
    first: int
    end: int
    lookahead: int


class FlowHiftDetokenizer:
    def __init__(
        self,
        flow: CausalFlow,
        hift: HiFTGenerator,
        chunk_tokens: int,
        left: int = 8,
        right: int = 8,
        context_chunks: int | None = DEFAULT_CONTEXT_CHUNKS,
        first_hop: int | None = None,
        graph_rows: tuple[int, ...] | None = None,
    ) -> None:
        self.flow = flow
        self.hift = hift
        self.chunk = chunk_tokens
        self.lookahead = flow.cfg.pre_lookahead_len
        self.ratio = flow.token_mel_ratio
        self.first_hop = chunk_tokens if first_hop is None else first_hop
        # The first chunk must leave HiFT some frames to emit past its right context.
        least = right // self.ratio + 1
        if not least <= self.first_hop <= chunk_tokens:
            raise ValueError(
                f"first_hop_tokens must be in [{least}, {chunk_tokens}], got {self.first_hop}: "
                f"the first chunk is at most one flow chunk ({chunk_tokens} tokens) and must hold "
                f"more than HiFT's {right}-frame look-ahead"
            )
        self.left, self.right = left, right
        self.context_chunks = context_chunks
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran
        # Voice prompts longer than GRAPH_PROMPT_CHUNKS whose windows are captured too, in
        # chunks (cover_prompt).
        self.long_prompts: set[int] = set()
        self._steps: list | None = None  # the solver's (t, dt) on the device (_euler_steps)
        # Row buckets captured; with graphs, larger calls are split into calls of the largest.
        self.graph_rows = tuple(sorted(graph_rows or self.GRAPH_ROWS))
        self.vocoder = HiftStreamer(hift, left, right, self.graph_rows, self.hift_frames())
        # Calls that found no captured graph (rows or frames past the buckets): each one is
        # a few hundred eager launches, so a growing count means jobs are outgrowing the buckets.
        self.eager_calls = self.vocoder.eager_calls
        self.sample_rate = hift.cfg.sampling_rate
        self.samples_per_frame = hift.cfg.samples_per_frame
        self.device = next(flow.parameters()).device
        self.dtype = next(flow.parameters()).dtype
        self.pinned = self.device.type == "cuda"  # pinned host buffers, async uploads

    def twin(self, graph_rows: tuple[int, ...]) -> FlowHiftDetokenizer:
        """A second detokenizer over the same weights and streaming settings, with buffers and
        CUDA graphs of its own (capture them with a CallableGraphs of their own), so that it may
        decode on another thread and stream while this one does: the engine's first-chunk lane.
        Streams are plain data: either one can continue a stream the other began. Both cover
        the same voice prompt lengths."""
        twin = FlowHiftDetokenizer(
            self.flow,
            self.hift,
            self.chunk,
            self.left,
            self.right,
            self.context_chunks,
            self.first_hop,
            graph_rows,
        )
        twin.long_prompts = self.long_prompts  # one set: a voice added later covers both
        return twin

    def new_stream(
        self, prompt_tokens: list[int], prompt_mel: torch.Tensor, speaker: torch.Tensor
    ) -> FlowHiftStream:
        # Chunk-causal attention counts its chunks from the prompt's first token: a prompt of
        # whole chunks keeps the generated chunks on the grid. Full attention has no grid, and
        # a prompt that is one chunk of its own (Step-Audio 2) starts the grid where it ends.
        on_grid = self.flow.encoder.chunk and not self.flow.cfg.prompt_chunk
        if on_grid and len(prompt_tokens) % self.chunk:
            raise ValueError(
                f"prompt tokens ({len(prompt_tokens)}) must be a multiple of the chunk {self.chunk}"
            )
        return FlowHiftStream(
            list(prompt_tokens), prompt_mel.to(self.device), speaker.to(self.device)
        )

    @staticmethod
    def push(state: FlowHiftStream, codes: list[int]) -> None:
        state.tokens.extend(codes)

    def first_audio_s(self, codes: int) -> float:
        """Seconds of audio a stream's first (non-final) call makes once `codes` tokens are
        pushed: the whole chunks of the grid whose look-ahead tokens exist, less HiFT's right
        context (the engine sizes a first chunk by it: SpeechModel.first_chunk_audio_s)."""
        ready = self._chunk_start(self._chunk_index(max(0, codes - self.lookahead)))
        frames = max(0, ready * self.ratio - self.right)
        return frames * self.samples_per_frame / self.sample_rate

    # --- the batched call --------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, states: list[FlowHiftStream], final: list[bool]) -> list[np.ndarray]:
        self._flow_step(states, final)
        return self._hift_step(states, final)

    # The chunk grid over the generated tokens: a first chunk of `first_hop` tokens, then
    # `chunk`-token chunks. The flow attends within it (encoder.chunk_ids), so a chunk's mel is
    # final once the chunk and its look-ahead tokens exist, whatever the first hop.
    def _chunk_start(self, k: int) -> int:
        """Generated token where chunk k starts."""
        return 0 if k == 0 else self.first_hop + (k - 1) * self.chunk

    def _chunk_index(self, token: int) -> int:
        """The chunk holding generated token `token`."""
        return 0 if token < self.first_hop else 1 + (token - self.first_hop) // self.chunk

    def _ready_tokens(self, state: FlowHiftStream, final: bool) -> int:
        """Generated tokens whose mel can be made now: every token when final, else the whole
        chunks whose look-ahead tokens exist."""
        n = len(state.tokens)
        if final:
            return n
        return self._chunk_start(self._chunk_index(max(0, n - self.lookahead)))

    def _windows(self, state: FlowHiftStream, final: bool) -> list[FlowWindow]:
        """The flow rows that make `state`'s newly ready mel: one per chunk, each over the
        chunk's bounded window of history (or, unbounded, one row over the whole history)."""
        ready, n = self._ready_tokens(state, final), len(state.tokens)
        if ready <= state.tokens_decoded:
            return []
        first_k = self._chunk_index(state.tokens_decoded)  # tokens_decoded is on the grid
        if self.context_chunks is None:
            ks = [first_k]
        else:
            ks = list(range(first_k, self._chunk_index(ready - 1) + 1))
        windows = []
        for i, k in enumerate(ks):
            end = self._chunk_start(ks[i + 1]) if i + 1 < len(ks) else ready
            if self.context_chunks is None:
                start = 0
            else:
                start = self._chunk_start(max(0, k - self.context_chunks))
            # The look-ahead conv sees the tokens after `end` that exist (zeros past the end of
            # a final utterance, as when it is decoded whole).
            windows.append(
                FlowWindow(state, start, self._chunk_start(k), end, min(self.lookahead, n - end))
            )
        return windows

    def _flow_step(self, states: list[FlowHiftStream], final: list[bool]) -> None:
        rows = [w for s, fin in zip(states, final, strict=True) for w in self._windows(s, fin)]
        # With graphs, more rows than the largest bucket go as several replays, not eagerly
        # (a state's windows are in order, so its mel still grows in order).
        for call in graph_calls(rows, self.graph_rows, self.graphs is not None):
            self._flow_call(call)

    def _flow_call(self, rows: list[FlowWindow]) -> None:
        seqs, prompts, out_lengths = self.row_tokens(rows)
        mel = self.run_bucketed(rows, seqs, out_lengths)
        for i, (p, w) in enumerate(zip(prompts, rows, strict=True)):
            s, r = w.state, self.ratio
            new = mel[i, :, r * (p + w.first - w.start) : r * (p + w.end - w.start)]
            # A copy either way: a replay's output buffer is rewritten by the next one.
            s.mel = new.clone() if s.mel is None else torch.cat([s.mel, new], dim=1)
            s.tokens_decoded = w.end

    def run_bucketed(self, rows, seqs, out_lengths):
        """flow_rows over the rows' packed inputs, padded to the captured (rows, frames) bucket
        and replayed from its graphs when there are, else eagerly at their own size. A replay's
        outputs are rewritten by its next one."""
        frames = self.ratio * max(out_lengths)
        n, key = len(rows), self._flow_bucket(len(rows), frames)
        if key is None:
            padded_rows, width = n, max(len(q) for q in seqs)
        else:
            _, padded_rows, frames = key
            width = frames // self.ratio + self.lookahead
        inputs = self._flow_inputs(rows, seqs, out_lengths, padded_rows, frames, width)
        if key is None:
            if self.graphs is not None:
                note_eager(self.eager_calls, ("flow", n, frames))
            return self.flow_rows(*inputs)
        return self._replay_flow(key, inputs)

    def _replay_flow(self, key: tuple, inputs: list[torch.Tensor]) -> torch.Tensor:
        """flow_rows from graphs: the conditioning and the CFG inputs ("prep"), then one
        Euler step's graph ("euler") per step. Between steps the graphs may `pace` the
        thread: wait for the step to run, so the GPU never holds a whole job of this codec's
        kernels ahead of the LLM's (--codec-pacing: ModelFacts.codec_pacing)."""
        _, rows, frames = key
        x, *fixed = self.graphs.run(("prep", rows, frames), self.prep_rows, inputs)
        for t, dt in self._euler_steps():
            x = self.graphs.run(("euler", rows, frames), self.flow.euler_step, [x, *fixed, t, dt])
            self.graphs.pace()
        return x.float()

    def prep_rows(self, ints, prompt_mel, speaker) -> tuple[torch.Tensor, ...]:
        """condition_rows, then the solver's doubled inputs (flow.solver_inputs)."""
        return self.flow.solver_inputs(*self.condition_rows(ints, prompt_mel, speaker))

    def _euler_steps(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self._steps is None:
            with torch.inference_mode(False):  # plain tensors: usable in and out of it
                self._steps = self.flow.euler_steps(self.dtype)
        return self._steps

    def row_tokens(self, rows: list[FlowWindow]) -> tuple[list[list[int]], list[int], list[int]]:
        """Each row's tokens (prompt, then its window and look-ahead), prompt length and tokens
        to decode; raises ValueError for an utterance past the flow's fixed noise."""
        seqs = [w.state.prompt_tokens + w.state.tokens[w.start : w.end + w.lookahead] for w in rows]
        prompts = [len(w.state.prompt_tokens) for w in rows]
        out_lengths = [p + w.end - w.start for p, w in zip(prompts, rows, strict=True)]
        for w, out in zip(rows, out_lengths, strict=True):
            # A row's last frame starts from noise frame 2 * (its tokens + those skipped).
            if self.ratio * (out + w.start) > NOISE_FRAMES:
                raise ValueError(f"utterance longer than the flow's {NOISE_FRAMES} mel frames")
        return seqs, prompts, out_lengths

    def _flow_inputs(
        self,
        rows: list[FlowWindow],
        seqs: list[list[int]],
        out_lengths: list[int],
        padded_rows: int,
        frames: int,
        width: int,
    ) -> list[torch.Tensor]:
        """flow_rows' inputs on the device: the rows' integers built on the host in one
        (pinned) buffer and uploaded by one asynchronous copy, the prompt mels and speakers
        gathered on the device. Rows past len(rows) are padding (no tokens, all masked)."""
        ints = torch.zeros(padded_rows, width + 5, dtype=torch.long, pin_memory=self.pinned)
        table = ints.numpy()
        for i, (q, out, w) in enumerate(zip(seqs, out_lengths, rows, strict=True)):
            prompt = len(w.state.prompt_tokens)
            # Rows that hold the short first chunk shift the grid after it; rows starting later
            # sit on the plain grid (their start is a chunk start after the first hop).
            first_end = prompt + self.first_hop if w.start == 0 else width
            table[i, : len(q)] = q
            table[i, width:] = (len(q), out, w.state.prompt_mel.shape[0], w.start, first_end)
        ints = ints.to(self.device, non_blocking=True)
        mels = [w.state.prompt_mel for w in rows]
        longest = max(m.shape[0] for m in mels)
        mels = [
            F.pad(m, (0, 0, 0, longest - m.shape[0])) if m.shape[0] < longest else m for m in mels
        ]
        pad_rows = padded_rows - len(rows)
        prompt_mel = F.pad(torch.stack(mels), (0, 0, 0, frames - longest, 0, pad_rows))
        speaker = torch.stack([w.state.speaker for w in rows])
        if pad_rows:
            speaker = F.pad(speaker, (0, 0, 0, pad_rows))
        return [ints, prompt_mel, speaker]

    def flow_rows(
        self, ints: torch.Tensor, prompt_mel: torch.Tensor, speaker: torch.Tensor
    ) -> torch.Tensor:
        """The flow (condition + Euler solver) over packed rows: ints [R, T + 5] long, each row
        its T tokens (prompt then generated, zero-padded), then its token count, tokens to
        decode, prompt mel frames, generated tokens skipped before its window and where its
        short first chunk ends (flow.condition's arguments); prompt_mel [R, F, M]; speaker
        [R, E]. → mel [R, M, F] float32. Fixed shapes and no host syncs: capturable."""
        return self.flow.solve_euler(*self.condition_rows(ints, prompt_mel, speaker))

    def condition_rows(
        self, ints: torch.Tensor, prompt_mel: torch.Tensor, speaker: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """flow_rows' first half: flow.condition over the packed rows → the solver's inputs
        (noise z, mu, mask, spks, cond, chunks), F = prompt_mel's frames."""
        width = ints.shape[1] - 5
        lengths, out_lengths, prompt_frames, skipped, first_end = ints[:, width:].unbind(1)
        return self.flow.condition(
            ints[:, :width],
            lengths,
            out_lengths,
            prompt_mel.to(self.dtype),
            prompt_frames,
            speaker.to(self.dtype),
            skipped=skipped,
            first_end=first_end,
            short_by=self.chunk - self.first_hop,
            frames=prompt_mel.shape[1],
        )

    # --- CUDA graphs --------------------------------------------------------------------------
    # The flow of a job is captured per (rows, frames) bucket as two graphs: the conditioning
    # encoder with the solver's inputs ("prep"), and one Euler step (2 estimator passes, CFG's
    # halves batched: "euler"), replayed for each of the 10 steps; rows and frames (and
    # tokens, frames / 2 + look-ahead) are padded up to the bucket with lengths that mask them out (attention masks, causal
    # convolutions), which leaves the valid ones unchanged. Frames are captured in whole
    # chunks: one chunk up to the window of a voice prompt of GRAPH_PROMPT_CHUNKS chunks
    # (presets have none), and the windows of the longer prompts the model's voices have
    # (cover_prompt, up to MAX_GRAPH_PROMPT_CHUNKS); longer windows run eagerly. A short
    # first chunk (first_hop) adds its
    # own row length (prompt + first hop) for up to GRAPH_FIRST_ROWS rows: a request's first
    # chunk often runs alone, and it is the one time to first audio waits for; batched with
    # steady rows it takes their bucket. HiFT's windows are captured too (hift_stream).
    GRAPH_ROWS = (1, 2, 4, 8, 16, 32, 64)
    GRAPH_PROMPT_CHUNKS = 3
    MAX_GRAPH_PROMPT_CHUNKS = 12  # a 12 s voice clip; past it, the long prompt's jobs run eagerly
    GRAPH_FIRST_ROWS = 8

    def cover_prompt(self, chunks: int) -> bool:
        """Capture the windows of a voice prompt of `chunks` chunks too (the model calls this
        for each voice it registers, before the graphs are captured): a prompt longer than
        GRAPH_PROMPT_CHUNKS (a voice clip of 4 s or more) would otherwise run every job of its
        streams eagerly, hundreds of milliseconds on a GPU. Each length adds its windows'
        frame buckets, not every length up to it. Returns False past MAX_GRAPH_PROMPT_CHUNKS."""
        if chunks > self.MAX_GRAPH_PROMPT_CHUNKS:
            return False
        if chunks > self.GRAPH_PROMPT_CHUNKS:
            self.long_prompts.add(chunks)
        return True

    def _graph_prompts(self) -> list[int]:
        return [*range(self.GRAPH_PROMPT_CHUNKS + 1), *sorted(self.long_prompts)]

    def graph_frames(self, rows: int | None = None) -> list[int]:
        """The frame buckets captured for `rows` rows (None: every row bucket's): every window
        of each prompt length covered (its prompt, then 1 up to the context + 1 chunks). A
        batch pads to its longest row, which is one of these."""
        window = (self.context_chunks or 0) + 1
        unit = self.ratio * self.chunk
        frames = {unit * (p + n) for p in self._graph_prompts() for n in range(1, window + 1)}
        if self.first_hop < self.chunk and (rows is None or rows <= self.GRAPH_FIRST_ROWS):
            frames |= {unit * p + self.ratio * self.first_hop for p in self._graph_prompts()}
        return sorted(frames)

    def hift_frames(self) -> tuple[int, ...]:
        """HiFT's standard window lengths: a request's first window (its first chunk's
        frames), the second when the first left fewer than `left` frames of context, then
        left + chunk + right frames, an utterance's last window (its last chunk with the
        look-ahead tokens after it, and the `right` frames held back before it), and the same
        with a second chunk (tokens that came while the request's previous job was in
        flight: a last flush of 30 tokens is 76 frames). Shorter windows widen to one of these
        (hift_stream.HiftStreamer); longer ones (a flush of more chunks) run eagerly."""
        first = self.ratio * self.first_hop
        steady = self.left + self.ratio * self.chunk + self.right
        last = steady + self.ratio * self.lookahead
        frames = {first, steady, last, last + self.ratio * self.chunk}
        if first - self.right < self.left:
            frames.add(first + self.ratio * self.chunk)
        return tuple(sorted(frames))

    def _flow_bucket(self, n: int, frames: int) -> tuple | None:
        """The captured graphs' key for n rows of up to `frames` frames, or None (eager)."""
        rows = next((r for r in self.graph_rows if r >= n), None)
        padded = next((f for f in self.graph_frames(rows) if f >= frames), None)
        captured = self.graphs is not None and ("prep", rows, padded) in self.graphs
        return ("flow", rows, padded) if captured else None

    def enable_cuda_graphs(self, graphs) -> None:
        """Capture the flow for every (rows, frames) bucket and HiFT for every (rows, window)
        bucket with the engine's CallableGraphs."""
        m, e = self.flow.cfg.output_size, self.flow.cfg.spk_embed_dim
        dev = self.device
        began = time.perf_counter()
        if dev.type == "cuda":
            # A float32 flow's (and HiFT's) linear layers in the convs' TF32.
            gemms_in_conv_precision()
        # The windowed flow per (rows, frames): conditioning + the solver's inputs ("prep"),
        # then one Euler step ("euler"). The estimator's attention projections as one GEMM
        # (flow_hift/qkv.py), then Inductor's kernels for its blocks, if asked.
        join_qkv(self.flow.decoder.estimator)
        graphs.compile_regions(self.flow.decoder.estimator.repeated_blocks())
        with torch.inference_mode():
            for rows in reversed(self.graph_rows):
                for frames in reversed(self.graph_frames(rows)):
                    width = frames // self.ratio + self.lookahead
                    ints = torch.zeros(rows, width + 5, dtype=torch.long, device=dev)
                    prompt_mel = torch.zeros(rows, frames, m, device=dev)
                    speaker = torch.zeros(rows, e, device=dev)
                    inputs = [ints, prompt_mel, speaker]
                    out = self._capture(graphs, ("prep", rows, frames), self.prep_rows, inputs)
                    # One Euler step's graph, replayed for every step. Its fixed inputs are the
                    # prep graph's outputs themselves: a replay copies in only x, t and dt.
                    x, *fixed = out
                    step = [x, *fixed, *self._euler_steps()[0]]
                    borrow = tuple(range(1, 1 + len(fixed)))
                    key = ("euler", rows, frames)
                    self._capture(graphs, key, self.flow.euler_step, step, borrow)
        self.vocoder.enable_cuda_graphs(graphs, self.hift_frames())
        self.graphs = graphs
        log.info(
            "captured the flow for rows %s x frames %s and HiFT for windows of %s frames in %.1f s",
            list(self.graph_rows),
            self.graph_frames(),
            self.hift_frames(),
            time.perf_counter() - began,
        )

    @staticmethod
    def _capture(graphs, key: tuple, fn, inputs: list[torch.Tensor], borrow=()):
        try:
            return graphs.capture(key, fn, inputs, borrow)
        except RuntimeError as exc:  # not yet run on every GPU: say what to do
            raise RuntimeError(
                f"capturing the flow in a CUDA graph failed for {key} ({exc}); start the "
                "server with --eager to run without CUDA graphs"
            ) from exc

    def _hift_step(self, states: list[FlowHiftStream], final: list[bool]) -> list[np.ndarray]:
        return self.vocoder.step(states, final)
