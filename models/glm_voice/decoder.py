"""GLM-4-Voice's speech decoder, streamed per request and batched across requests: speech
tokens (12.5/s) → mel (MaskedDiffWithXvec flow, 22050/256 frames/s) → 22.05 kHz audio (HiFT).

The reference streaming (THUDM/GLM-4-Voice flow_inference.py + web_demo.py) decodes a reply in
blocks of tokens; each block is one flow call over ALL tokens so far, the earlier ones as the
prompt (their mel, already made, is the condition `cond`; the call's output drops those
frames). The last 5 tokens' worth of mel (34 frames) of a call are held back and cross-faded
(Hamming) into the next call's first frames, which re-generate them. That costs more per block
the longer the reply (quadratic). Here a block's flow call covers a **bounded window**: the
tokens from `context_tokens` before the block (rounded down to the encoder's 10-token attention
block, so the window's block grid is the utterance's) to the last token pushed; the window's
mel frames are those of the utterance from frame F(start) on (F = the reference's
frames-of-tokens rule), the already-final ones given as `cond`. With `context_tokens=None` the
window always starts at token 0: the reference's calls exactly (test).

Noise: the reference draws `randn_like(mu)` after `torch.manual_seed(42)` on every call, so a
frame's noise depends on the call's length. Here a frame's starting noise is a function of
(request seed, absolute frame): a re-generated frame starts from the same noise in every call,
output is reproducible per request and independent of what else is in the batch.

Batching: the flow's U-Net adds its 0/1 padding mask to the attention scores (the reference
does; the weights expect it) and the length regulator's GroupNorm spans all frames, so padding
would change a row. Rows are batched only with rows of the same (tokens, frames) shape;
steady-state windows (context + block) share a shape or two.

HiFT: models/codecs/flow_hift/hift_stream.py (8 frames of context each side, carried sine
phase), in place of the reference's 1-frame mel cache and 256-sample source cache."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.hift_stream import HiftStreamer
from models.codecs.flow_hift.masked_flow import MaskedDiffWithXvec

BLOCK_TOKENS = (10, 20, 40)  # tokens per flow call: the reference's first blocks, then 40 each
OVERLAP_TOKENS = 5  # the reference's token_overlap_len: mel held back and cross-faded
DEFAULT_CONTEXT_TOKENS = 60  # history (4.8 s) each window carries before its block
DEFAULT_NOISE_SEED = 42  # the reference's torch.manual_seed(42)
NOISE_PAGE = 64  # frames drawn per generator call (see frame_noise)


def frame_noise(seed: int, start: int, frames: int, n_mels: int) -> torch.Tensor:
    """N(0, 1) noise [n_mels, frames] for absolute frames [start, start + frames): a pure
    function of (seed, frame). Drawn in pages of NOISE_PAGE frames, each from its own
    generator, so any frame range costs at most two extra pages."""
    first, last = start // NOISE_PAGE, (start + frames - 1) // NOISE_PAGE
    pages = [
        torch.randn(
            n_mels, NOISE_PAGE, generator=torch.Generator().manual_seed(seed * 1_000_003 + p)
        )
        for p in range(first, last + 1)
    ]
    offset = start - first * NOISE_PAGE
    return torch.cat(pages, dim=1)[:, offset : offset + frames]


@dataclass
class GlmDecoderStream:
    seed: int
    tokens: list[int] = field(default_factory=list)
    tokens_decoded: int = 0  # tokens whose mel has been made (final or held)
    calls: int = 0  # flow calls so far (picks the block size)
    history: torch.Tensor | None = None  # [M, n] final mel from frame history_start (flow cond)
    history_start: int = 0
    held: torch.Tensor | None = None  # [M, overlap] the last call's held-back frames
    # HiftStreamer's state (hift_stream.VocoderState): final mel not yet vocoded, + context.
    mel: torch.Tensor | None = None
    mel_start: int = 0
    emitted_frames: int = 0
    phase: torch.Tensor | None = None

    @property
    def mel_frames(self) -> int:
        return self.mel_start + (0 if self.mel is None else self.mel.shape[1])


@dataclass
class Window:
    """One flow row: tokens [start, end) of `state`; mel frames [f_start, f_end) of the
    utterance, of which [f_start, f_known) are final already (the prompt)."""

    state: GlmDecoderStream
    start: int
    end: int
    f_start: int
    f_known: int
    f_end: int
    final: bool  # the utterance ends with this window: nothing is held back


class GlmVoiceDecoder:
    """models.glm_voice.model.SpeechTokenDecoder for THUDM/glm-4-voice-decoder."""

    def __init__(
        self,
        flow: MaskedDiffWithXvec,
        hift: HiFTGenerator,
        context_tokens: int | None = DEFAULT_CONTEXT_TOKENS,
        block_tokens: tuple[int, ...] = BLOCK_TOKENS,
        left: int = 8,
        right: int = 8,
    ) -> None:
        if context_tokens is not None and context_tokens < OVERLAP_TOKENS:
            # A window must reach back over the held-back frames it regenerates.
            raise ValueError(f"context_tokens must be at least {OVERLAP_TOKENS} (or None)")
        self.flow, self.hift = flow, hift
        self.vocoder = HiftStreamer(hift, left, right)
        self.context_tokens = context_tokens
        self.block_tokens = block_tokens
        self.sample_rate = hift.cfg.sampling_rate
        self.n_mels = flow.cfg.output_size
        self.overlap = flow.mel_frames(OVERLAP_TOKENS)  # 34 frames
        window = np.hamming(2 * self.overlap)
        self.fade_in = torch.tensor(window[: self.overlap], dtype=torch.float32)
        self.fade_out = torch.tensor(window[self.overlap :], dtype=torch.float32)
        self.device = next(flow.parameters()).device

    def new_stream(self, seed: int = DEFAULT_NOISE_SEED) -> GlmDecoderStream:
        return GlmDecoderStream(seed)

    @staticmethod
    def push(state: GlmDecoderStream, tokens: list[int]) -> None:
        state.tokens.extend(int(t) for t in tokens)

    def first_audio_s(self, tokens: int) -> float:
        """Seconds of audio a stream's first (non-final) decode makes of `tokens` speech
        tokens: none short of the first block, else every token's mel less the frames held
        back for the next call's cross-fade and HiFT's right context."""
        if tokens < self.block_tokens[0]:
            return 0.0
        frames = self.flow.mel_frames(tokens) - self.overlap - self.vocoder.right
        return max(0, frames) * self.vocoder.samples_per_frame / self.sample_rate

    @torch.inference_mode()
    def decode(self, states: list[GlmDecoderStream], final: list[bool]) -> list[np.ndarray]:
        """Make the mel of every stream whose next block is complete (or that is final), then
        vocode what is ready. → new audio per stream (float32, 22.05 kHz; may be empty)."""
        windows = [self._window(s, fin) for s, fin in zip(states, final, strict=True)]
        groups: dict[tuple[int, int], list[Window]] = {}
        for w in windows:
            if w is not None:
                groups.setdefault((w.end - w.start, w.f_end - w.f_start), []).append(w)
        for rows in groups.values():
            self._flow_rows(rows)
        for s, w, fin in zip(states, windows, final, strict=True):
            if fin and w is None and s.held is not None:  # nothing new: the held frames are final
                self._finalise(s, s.held)
                s.held = None
        return self.vocoder.step(states, final)

    def _window(self, s: GlmDecoderStream, final: bool) -> Window | None:
        new = len(s.tokens) - s.tokens_decoded
        block = self.block_tokens[min(s.calls, len(self.block_tokens) - 1)]
        if new <= 0 or (new < block and not final):
            return None
        start = 0
        if self.context_tokens is not None:
            grid = self.flow.cfg.block_size
            start = max(0, s.tokens_decoded - self.context_tokens) // grid * grid
        f_known = self._known_frames(s)
        f_start, f_end = self.flow.mel_frames(start), self.flow.mel_frames(len(s.tokens))
        return Window(s, start, len(s.tokens), f_start, f_known, f_end, final)

    @staticmethod
    def _known_frames(s: GlmDecoderStream) -> int:
        return s.history_start + (0 if s.history is None else s.history.shape[1])

    def _flow_rows(self, rows: list[Window]) -> None:
        """One batched flow call over windows of one shape; then each row's new frames are
        cross-faded with the held ones, the last `overlap` held back (unless final)."""
        frames = rows[0].f_end - rows[0].f_start
        dev, m = self.device, self.n_mels
        tokens = torch.tensor([w.state.tokens[w.start : w.end] for w in rows], device=dev)
        cond = torch.zeros(len(rows), m, frames, device=dev)
        noise = torch.stack([frame_noise(w.state.seed, w.f_start, frames, m) for w in rows]).to(dev)
        for i, w in enumerate(rows):
            s = w.state
            if w.f_known > w.f_start:  # the window's final frames are its prompt
                known = s.history[:, w.f_start - s.history_start : w.f_known - s.history_start]
                cond[i, :, : known.shape[1]] = known
        dtype = next(self.flow.parameters()).dtype
        mel = self.flow(tokens, frames, cond.to(dtype), noise.to(dtype))
        for i, w in enumerate(rows):
            self._take(w, mel[i, :, w.f_known - w.f_start :].float())

    def _take(self, w: Window, out: torch.Tensor) -> None:
        s = w.state
        if s.held is not None:
            n = s.held.shape[1]
            fade_in, fade_out = self.fade_in[:n].to(out.device), self.fade_out[-n:].to(out.device)
            out = out.clone()
            out[:, :n] = out[:, :n] * fade_in + s.held * fade_out
        s.tokens_decoded, s.calls = w.end, s.calls + 1
        hold = 0 if w.final else min(self.overlap, out.shape[1])
        s.held = out[:, out.shape[1] - hold :].clone() if hold else None
        self._finalise(s, out[:, : out.shape[1] - hold])
        # History older than this window's start is never a prompt again (starts only grow).
        if s.history is not None and w.f_start > s.history_start:
            s.history = s.history[:, w.f_start - s.history_start :]
            s.history_start = w.f_start

    def _finalise(self, s: GlmDecoderStream, frames: torch.Tensor) -> None:
        """Frames that no later call changes: the flow's prompt from now on, and HiFT's input."""
        s.history = frames if s.history is None else torch.cat([s.history, frames], dim=1)
        s.mel = frames if s.mel is None else torch.cat([s.mel, frames], dim=1)
