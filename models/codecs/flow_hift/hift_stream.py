"""Streaming HiFT vocoding with explicit per-request state, batched across requests.

HiFT is not causal: a window of mel is vocoded with `left` frames of context before the frames
it emits and `right` frames after them (the look-ahead that delays audio, as the reference's
mel cache and cross-fade do), and the sine excitation's phase is carried from call to call.
Emitted audio differs from a whole-utterance vocoding only by what falls outside the context
windows of HiFT's receptive field (tests/models/test_flow_hift.py measures it). Windows are
grouped by length (steady-state windows all have left + chunk + right frames), each group one
batched call."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from models.codecs.flow_hift.hift import HiFTGenerator


class VocoderState(Protocol):
    """What a request's stream state carries for HiftStreamer (FlowHiftStream, GLM's stream)."""

    mel: torch.Tensor | None  # [M, n] frames not yet vocoded plus `left` of context, from mel_start
    mel_start: int
    emitted_frames: int  # frames already turned into audio
    phase: torch.Tensor | None  # [H] float64 sine cycles run before frame emitted_frames

    @property
    def mel_frames(self) -> int: ...


class HiftStreamer:
    def __init__(self, hift: HiFTGenerator, left: int = 8, right: int = 8) -> None:
        self.hift = hift
        self.left, self.right = left, right
        self.samples_per_frame = hift.cfg.samples_per_frame
        self.n_harmonics = hift.cfg.nb_harmonics + 1
        self.device = next(hift.parameters()).device

    @torch.inference_mode()
    def step(self, states: list, final: list[bool]) -> list[np.ndarray]:
        """Vocode every state's mel that has `right` frames after it (all of it when final)."""
        audio = [np.zeros(0, dtype=np.float32)] * len(states)
        groups: dict[int, list[tuple[int, int, int, int]]] = {}
        for i, (s, fin) in enumerate(zip(states, final, strict=True)):
            end = s.mel_frames if fin else s.mel_frames - self.right
            if end <= s.emitted_frames:
                continue
            start = max(0, s.emitted_frames - self.left)
            stop = min(s.mel_frames, end + self.right)
            groups.setdefault(stop - start, []).append((i, start, end, stop))
        for rows in groups.values():
            for i, pcm in self._vocode(states, rows):
                audio[i] = pcm
        return audio

    def _vocode(self, states, rows):
        up, dev = self.samples_per_frame, self.device
        mel = torch.stack(
            [
                states[i].mel[:, a - states[i].mel_start : c - states[i].mel_start]
                for i, a, _, c in rows
            ]
        )
        f0 = self.hift.f0_predictor(mel)
        src = self.hift.m_source
        phase0 = []
        for (i, a, _, _), f0_row in zip(rows, f0, strict=True):
            s = states[i]
            carried = (
                s.phase
                if s.phase is not None
                else torch.zeros(self.n_harmonics, dtype=torch.float64, device=dev)
            )
            # Cycles before the window = cycles before the first emitted frame minus those of
            # the window's context frames.
            context = src.frame_cycles(f0_row[None], s.emitted_frames - a)[0]
            phase0.append((carried - context) % 1)
        start = torch.tensor([a * up for _, a, _, _ in rows], device=dev)
        source = src(f0, torch.stack(phase0), start)
        wav = self.hift.decode(mel, source)
        out = []
        for (i, a, e, _), row, f0_row in zip(rows, wav, f0, strict=True):
            s = states[i]
            first = s.emitted_frames - a
            emitted = src.frame_cycles(f0_row[None, first:], e - s.emitted_frames)[0]
            s.phase = ((s.phase if s.phase is not None else 0) + emitted) % 1
            out.append((i, row[first * up : (e - a) * up].float().cpu().numpy()))
            s.emitted_frames = e
            keep_from = max(0, e - self.left)
            s.mel = s.mel[:, keep_from - s.mel_start :]
            s.mel_start = keep_from
        return out
