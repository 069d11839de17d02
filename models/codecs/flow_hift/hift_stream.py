"""Streaming HiFT vocoding with explicit per-request state, batched across requests.

HiFT is not causal: a window of mel is vocoded with `left` frames of context before the frames
it emits and `right` frames after them (the look-ahead that delays audio, as the reference's
mel cache and cross-fade do), and the sine excitation's phase is carried from call to call.
Emitted audio differs from a whole-utterance vocoding only by what falls outside the context
windows of HiFT's receptive field (tests/models/test_flow_hift.py measures it). Windows are
grouped by length (steady-state windows all have left + chunk + right frames), each group one
batched call of `vocode_windows`.

Everything a window needs from its request (carried phase, where it starts, which frames it
emits) is an input tensor, so a group's call has fixed shapes and no host syncs: with
`enable_cuda_graphs` it replays from a CUDA graph per (rows, frames) bucket. Rows are padded up
to the bucket (rows are independent); frames are not (HiFT is not causal, padding frames would
change the last ones). Instead, a window shorter than one of the standard `widths` (an
utterance's last window, a part-chunk flush) takes more left context, already vocoded frames
kept for it, up to the next standard width: its emitted frames see more of the utterance, as
in a whole-utterance vocoding, and its call replays the graph of that width rather than
running hundreds of eager launches. A call uploads its per-row integers in one pinned buffer
and waits once for all of its audio."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from models.codecs.flow_hift.hift import HiFTGenerator

log = logging.getLogger("voxgate.flow_hift")


def note_eager(counts: Counter, shape: tuple) -> None:
    """Count a call that found no captured graph (shape: (stage, rows, frames)); say so the
    first time each shape runs eagerly, since each such call costs hundreds of launches."""
    if not counts[shape]:
        log.info("no CUDA graph for %s %d rows x %d frames: running it eagerly", *shape)
    counts[shape] += 1


def graph_calls(rows: list, graph_rows: tuple[int, ...], graphed: bool) -> list[list]:
    """`rows` in calls of at most the largest captured bucket (with graphs: a larger call
    would run eagerly, a few hundred launches), in order; one call without graphs."""
    most = graph_rows[-1] if graphed else max(len(rows), 1)
    return [rows[at : at + most] for at in range(0, len(rows), most)]


class VocoderState(Protocol):
    """What a request's stream state carries for HiftStreamer (FlowHiftStream, GLM's stream)."""

    mel: torch.Tensor | None  # [M, n] frames not yet vocoded plus `left` of context, from mel_start
    mel_start: int
    emitted_frames: int  # frames already turned into audio
    phase: torch.Tensor | None  # [H] float64 sine cycles run before frame emitted_frames

    @property
    def mel_frames(self) -> int: ...


class HiftStreamer:
    GRAPH_ROWS = (1, 2, 4, 8, 16, 32, 64)

    def __init__(
        self,
        hift: HiFTGenerator,
        left: int = 8,
        right: int = 8,
        graph_rows: tuple[int, ...] | None = None,
        widths: tuple[int, ...] = (),
    ) -> None:
        self.hift = hift
        # Standard window lengths (frames): shorter windows widen their left context to the
        # next one when the frames are kept (see the module's note). () keeps every window
        # at `left` frames of context.
        self.widths = tuple(sorted(widths))
        # Row buckets captured; with graphs, larger groups are split into calls of the largest.
        self.graph_rows = tuple(sorted(graph_rows or self.GRAPH_ROWS))
        self.left, self.right = left, right
        self.samples_per_frame = hift.cfg.samples_per_frame
        self.n_harmonics = hift.cfg.nb_harmonics + 1
        self.device = next(hift.parameters()).device
        self.dtype = next(hift.parameters()).dtype
        self.pinned = self.device.type == "cuda"  # pinned host buffers, async copies
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran
        self.eager_calls: Counter = Counter()  # (stage, rows, frames) of calls no graph fitted
        self._zero_phase = torch.zeros(self.n_harmonics, dtype=torch.float64, device=self.device)

    @torch.inference_mode()
    def step(self, states: list, final: list[bool]) -> list[np.ndarray]:
        """Vocode every state's mel that has `right` frames after it (all of it when final)."""
        audio = [np.zeros(0, dtype=np.float32)] * len(states)
        by_width: dict[int, list[tuple[int, int, int, int]]] = {}
        for i, (s, fin) in enumerate(zip(states, final, strict=True)):
            end = s.mel_frames if fin else s.mel_frames - self.right
            if end <= s.emitted_frames:
                continue
            stop = min(s.mel_frames, end + self.right)
            start = self._window_start(s, stop)
            by_width.setdefault(stop - start, []).append((i, start, end, stop))
        # (window frames, rows) per call; with graphs, at most the largest bucket's rows each.
        graphed = self.graphs is not None
        groups = [
            (w, call)
            for w, rows in by_width.items()
            for call in graph_calls(rows, self.graph_rows, graphed)
        ]
        if not groups:
            return audio
        # Each group's rows padded to its graph bucket (or not, eagerly), one after another in
        # one host buffer of (first emitted frame, frames emitted, first sample) per row.
        padded = [self._bucket(len(rows), w)[0] for w, rows in groups]
        ints = torch.zeros(sum(padded), 3, dtype=torch.long, pin_memory=self.pinned)
        table, at = ints.numpy(), 0
        for (_, rows), size in zip(groups, padded, strict=True):
            for k, (i, a, e, _) in enumerate(rows):
                s = states[i]
                first = s.emitted_frames - a
                table[at + k] = (first, e - s.emitted_frames, a * self.samples_per_frame)
            at += size
        ints = ints.to(self.device, non_blocking=True)
        pending, at = [], 0
        for (w, rows), size in zip(groups, padded, strict=True):
            firsts = table[at : at + len(rows), 0].tolist()
            wav = self._vocode(states, rows, w, ints[at : at + size])
            pending.append((rows, firsts, wav))
            at += size
        if self.pinned:
            torch.cuda.current_stream(self.device).synchronize()  # the job's one wait for audio
        up = self.samples_per_frame
        for rows, firsts, wav in pending:
            pcm = wav.numpy()
            for k, ((i, a, e, _), first) in enumerate(zip(rows, firsts, strict=True)):
                audio[i] = pcm[k, first * up : (e - a) * up]
        return audio

    def _window_start(self, state, stop: int) -> int:
        """Where the window ending at `stop` starts: `left` frames before the first frame to
        emit, or earlier, to the next standard width, when the frames are kept."""
        start = max(0, state.emitted_frames - self.left)
        width = next((w for w in self.widths if w >= stop - start), None)
        if width is not None and stop - width >= state.mel_start:
            return stop - width
        return start

    def _bucket(self, n: int, frames: int) -> tuple[int, tuple | None]:
        """(rows to pad n rows of `frames`-frame windows to, the graph key) — (n, None) when
        no captured graph fits."""
        rows = next((r for r in self.graph_rows if r >= n), None)
        key = ("hift", rows, frames)
        if self.graphs is None or rows is None or key not in self.graphs:
            return n, None
        return rows, key

    def _vocode(self, states, rows, frames: int, ints: torch.Tensor) -> torch.Tensor:
        """One group's windows (ints [R, 3] on the device, R >= rows padded) → its audio in a
        host tensor [rows, frames * samples_per_frame] (pinned and still being copied on the
        GPU: read it after the stream is synchronized). Updates the states."""
        n = len(rows)
        r, key = self._bucket(n, frames)
        mel = torch.stack(
            [
                states[i].mel[:, a - states[i].mel_start : c - states[i].mel_start]
                for i, a, _, c in rows
            ]
        )  # [n, M, W]
        carried = torch.stack([self._carried(states[i]) for i, *_ in rows])  # [n, H]
        if r > n:
            mel = F.pad(mel, (0, 0, 0, 0, 0, r - n))
            carried = F.pad(carried, (0, 0, 0, r - n))
        inputs = [mel.to(self.dtype), carried, ints]
        if key is None:
            if self.graphs is not None:
                note_eager(self.eager_calls, ("hift", n, frames))
            wav, phase = self.vocode_windows(*inputs)
        else:
            wav, phase = self.graphs.run(key, self.vocode_windows, inputs)
        # The graph's outputs are rewritten by its next replay: copy out what is kept.
        host = torch.empty(n, wav.shape[1], dtype=wav.dtype, pin_memory=self.pinned)
        host.copy_(wav[:n], non_blocking=self.pinned)
        phase = phase[:n].clone()
        for k, (i, _, e, _) in enumerate(rows):
            s = states[i]
            s.phase = phase[k]
            s.emitted_frames = e
            # A later window may widen to the widest standard width: keep its frames.
            keep_from = max(0, e - max((self.left, *self.widths)))
            s.mel = s.mel[:, keep_from - s.mel_start :]
            s.mel_start = keep_from
        return host

    def _carried(self, state) -> torch.Tensor:
        return self._zero_phase if state.phase is None else state.phase

    def vocode_windows(
        self, mel: torch.Tensor, carried: torch.Tensor, ints: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """HiFT over windows of mel [R, M, W]; carried [R, H] float64 sine cycles run before
        each row's first emitted frame; ints [R, 3]: (first emitted frame in the window, frames
        emitted, the window's first sample in the utterance). → (audio [R, W * up] of the
        whole window, the cycles run before the first frame after the emitted ones [R, H]).
        Fixed shapes, no host syncs: capturable in a CUDA graph."""
        first, count, start = ints.unbind(1)
        up, src = self.samples_per_frame, self.hift.m_source
        f0 = self.hift.f0_predictor(mel)  # [R, W]
        rates = src.cycle_rates(f0)  # [R, W, H]
        frame = torch.arange(mel.shape[2], device=mel.device)[None, :, None]
        before = frame < first[:, None, None]
        emitted = (frame >= first[:, None, None]) & (frame < (first + count)[:, None, None])
        # Cycles before the window = cycles before the first emitted frame minus those of the
        # window's context frames.
        context = ((rates * before).sum(dim=1) * up) % 1
        source = src(f0, (carried - context) % 1, start)
        wav = self.hift.decode(mel, source)
        run = ((rates * emitted).sum(dim=1) * up) % 1
        return wav, (carried + run) % 1

    # --- CUDA graphs --------------------------------------------------------------------------
    def enable_cuda_graphs(self, graphs, frames: list[int]) -> None:
        """Capture vocode_windows for every graph_rows bucket x window length in `frames`."""
        m = self.hift.cfg.in_channels
        with torch.inference_mode():
            for rows in reversed(self.graph_rows):
                for w in sorted(frames, reverse=True):
                    mel = torch.zeros(rows, m, w, dtype=self.dtype, device=self.device)
                    carried = torch.zeros(
                        rows, self.n_harmonics, dtype=torch.float64, device=self.device
                    )
                    ints = torch.zeros(rows, 3, dtype=torch.long, device=self.device)
                    try:
                        graphs.capture(("hift", rows, w), self.vocode_windows, [mel, carried, ints])
                    except RuntimeError as exc:
                        raise RuntimeError(
                            f"capturing HiFT in a CUDA graph failed for {rows} rows x {w} frames "
                            f"({exc}); start the server with --eager to run without CUDA graphs"
                        ) from exc
        self.graphs = graphs
