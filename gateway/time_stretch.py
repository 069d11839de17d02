"""Pitch-preserving time-stretch of a response's audio (OpenAI's `speed`), streaming: WSOLA.

Waveform-similarity overlap-add keeps the pitch because it never resamples: it cuts the model's
PCM into blocks half a window long and cross-fades each into the next, taking each new block
from near where the input should be by now (block k nominally at k · speed · hop) but shifted,
within ± a quarter window, to where the input best continues what is already playing. Speech
is periodic at its pitch over tens of ms, so the fades join waveforms in phase: no clicks, no
phasiness. Why not a phase vocoder: it smears transients and makes speech sound reverberant
("phasiness") unless its phases are locked, and it needs a window of 2-4 times this one to
resolve low voices (more latency); time-domain overlap-add aligned on the waveform, as here, is
the usual choice for speech for that reason (SoundTouch's SOLA-style stretch and Sonic's
pitch-synchronous one are of the same kind). No maintained Python package streams it with a
bounded hold, hence this file.

Per block k ≥ 1 (hop H = window / 2, tolerance D = window / 4, x the input):

    template  = x[cont : cont + H]          what the playing block continues into
    p         = argmax over |c - round(k·speed·H)| ≤ D of  <x[c : c+H], template> / |x[c : c+H]|
    output[kH : kH + H] = template · fade_out + x[p : p + H] · fade_in    (fade_in + fade_out = 1)
    cont      = p + H

Block 0 is x[0 : H] as it is, so the start is untouched. The fades are the halves of a periodic
Hann window, so equal waveforms cross-fade to themselves.

Streaming: a block is made only once every sample it reads has arrived, so the output of a
stream cut into any chunks is the same samples as the stream whole (the same operations on the
same numbers). `flush` (end of the response) pads the input with silence and stops at exactly
round(n_in / speed) samples; the blocks stay within the input, but the last one or two
cross-fade into that silence, so a response's very end (its last ~hold / speed) may fade out.

Latency: what `push` holds back for the next chunk, at most `max_hold_samples` of input: about
one window (30 ms at speeds 0.5-2, 34 ms at 0.25; above 2, under one input hop, which is under
15 ms of the played audio). Nothing else waits: the first chunk's audio comes out at once, less
that tail. At speed 1 the stretcher is the identity and costs nothing.
"""

from __future__ import annotations

import math

import numpy as np

SPEED_RANGE = (0.25, 4.0)  # OpenAI's `speed`
WINDOW_S = 0.03  # long enough to hold two pitch periods of a low voice (67 Hz)
_SILENT = 1e-10  # a template below this energy has no waveform to match: take the nominal block


def check_speed(speed: object, name: str = "speed") -> float:
    """`speed` as a float, or ValueError saying what is accepted (the callers turn it into their
    protocol's error)."""
    low, high = SPEED_RANGE
    if isinstance(speed, bool) or not isinstance(speed, int | float) or not math.isfinite(speed):
        raise ValueError(f"`{name}` must be a number in [{low}, {high}]")
    if not low <= speed <= high:
        raise ValueError(f"`{name}` must be in [{low}, {high}], got {speed}")
    return float(speed)


class TimeStretcher:
    """One response's audio at `speed` times its rate, pitch unchanged. Not thread-safe: one
    call at a time (the response's encoder runs them in order)."""

    def __init__(self, speed: float, sample_rate: int, window_s: float = WINDOW_S) -> None:
        self.speed = check_speed(speed)
        self.sample_rate = sample_rate
        self.hop = max(8, round(window_s * sample_rate / 2))  # H: output samples per block
        self.tolerance = self.hop // 2  # D
        n = np.arange(self.hop)
        self._fade_in = (0.5 - 0.5 * np.cos(np.pi * n / self.hop)).astype(np.float64)
        self._fade_out = 1.0 - self._fade_in
        self._input_hop = self.speed * self.hop  # input advanced per block
        self._buf = np.zeros(0, np.float32)
        self._buf_start = 0  # the input index of _buf[0]
        self._received = 0  # input samples pushed
        self._blocks = 0  # output blocks made
        self._cont = 0  # input index the playing block continues at
        self._flushed = False

    @property
    def max_hold_samples(self) -> int:
        """The most input that `push` keeps back for the next chunk (the stream's end gives it
        all back): whichever of the three conditions a block waits for holds the most."""
        h, d = self.hop, self.tolerance
        return math.ceil(max(d + h, d + 2 * h - self._input_hop, self._input_hop)) + 1

    @property
    def max_hold_s(self) -> float:
        return self.max_hold_samples / self.sample_rate

    def push(self, pcm: np.ndarray) -> np.ndarray:
        """pcm: float32 [n] mono. Returns the stretched audio now complete (float32)."""
        if self._flushed:
            raise RuntimeError("the stream was flushed; start a new TimeStretcher")
        if len(pcm) == 0:
            return np.zeros(0, np.float32)
        if self.speed == 1.0:  # the identity, at no cost
            return np.asarray(pcm, np.float32)
        self._buf = np.concatenate([self._buf, np.asarray(pcm, np.float32)])
        self._received += len(pcm)
        return self._run(limit=self._received / self.speed)

    def flush(self) -> np.ndarray:
        """The rest: the output ends at round(n_in / speed) samples in all."""
        if self._flushed:
            return np.zeros(0, np.float32)
        self._flushed = True
        if self.speed == 1.0 or self._received == 0:
            return np.zeros(0, np.float32)
        target = round(self._received / self.speed)
        sent = self._blocks * self.hop
        pad = math.ceil(self._input_hop) + 2 * self.tolerance + 3 * self.hop
        self._buf = np.concatenate([self._buf, np.zeros(pad, np.float32)])
        out = self._run(limit=math.inf, target=target, available=self._received + pad)
        return out[: target - sent]

    # --- blocks ------------------------------------------------------------------------------
    def _run(self, limit: float, target: int | None = None, available: int | None = None):
        """Make every block whose input is in, without getting ahead of the input (`limit`:
        output samples the input so far is worth) or past `target`."""
        have = self._received if available is None else available
        blocks = []
        while True:
            made = self._blocks * self.hop
            if target is not None and made >= target:
                break
            if made + self.hop > limit:
                break
            block = self._next_block(have)
            if block is None:
                break
            blocks.append(block)
        self._trim()
        if not blocks:
            return np.zeros(0, np.float32)
        return np.concatenate(blocks).astype(np.float32)

    def _x(self, start: int, stop: int) -> np.ndarray:
        return self._buf[start - self._buf_start : stop - self._buf_start].astype(np.float64)

    def _nominal(self, k: int) -> int:
        return round(k * self._input_hop)

    def _next_block(self, have: int) -> np.ndarray | None:
        h, d = self.hop, self.tolerance
        k = self._blocks
        if k == 0:
            if have < h:
                return None
            self._blocks, self._cont = 1, h
            return self._x(0, h)
        nominal = self._nominal(k)
        if have < max(nominal + d + h, self._cont + h):
            return None
        template = self._x(self._cont, self._cont + h)
        hi = nominal + d
        if self._flushed:  # the blocks stay within the input, not in flush's silence
            hi = max(self._buf_start, min(hi, self._received - h))
        lo = min(max(0, nominal - d), hi)  # never before _buf_start (see _trim)
        best = self._best_start(template, lo, hi, min(max(nominal, lo), hi))
        block = template * self._fade_out + self._x(best, best + h) * self._fade_in
        self._blocks, self._cont = k + 1, best + h
        return block

    def _best_start(self, template: np.ndarray, lo: int, hi: int, nominal: int) -> int:
        """The start in [lo, hi] whose block best continues `template` (normalised
        cross-correlation); the nominal one when the template is silent."""
        if float(template @ template) < _SILENT:
            return nominal
        h = self.hop
        span = self._x(lo, hi + h)
        scores = np.correlate(span, template, mode="valid")  # [hi - lo + 1]
        energy = np.concatenate([[0.0], np.cumsum(span * span)])
        norms = np.sqrt(np.maximum(energy[h:] - energy[:-h], 0.0) + _SILENT)
        return lo + int(np.argmax(scores / norms))

    def _trim(self) -> None:
        """Drop the input no later block reads."""
        keep = min(self._cont, max(0, self._nominal(self._blocks) - self.tolerance))
        drop = keep - self._buf_start
        if drop > 0:
            self._buf = self._buf[drop:]
            self._buf_start = keep
