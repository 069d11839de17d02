"""Orpheus through the four-stage interface: prompt → Llama on paged KV → SNAC audio."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from models.base import (
    BackboneShape,
    Candidates,
    ModelFacts,
    ModelInputError,
    Prompt,
    SpeechModel,
    StreamState,
)
from models.codecs.snac import SnacDetokenizer, SnacStream
from models.layers.llama import LlamaForCausalLM
from models.orpheus import tokens as T

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
MAX_TEXT_CHARS = 4000


def orpheus_prompt(tokenizer: Any, text: str, voice: str) -> list[int]:
    """Prompt token ids for `text` in `voice`; ModelInputError for text or a voice Orpheus
    cannot take. Shared by the engine model and the per-request baseline."""
    text = text.strip()
    if not text:
        raise ModelInputError("text is empty: give the model something to say")
    if len(text) > MAX_TEXT_CHARS:
        raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    if voice not in VOICES:
        raise ModelInputError(f"unknown voice {voice!r}; choose one of {', '.join(VOICES)}")
    text_ids = tokenizer.encode(f"{voice}: {text}").ids
    if not text_ids or text_ids[0] != T.BEGIN_OF_TEXT:
        text_ids = [T.BEGIN_OF_TEXT, *text_ids]
    return T.prompt_ids(text_ids)


@dataclass
class OrpheusStream(StreamState):
    snac: SnacStream
    partial: list[int] = field(default_factory=list)  # codes of the frame being assembled
    dropped_tokens: int = 0  # tokens that were not audio tokens of their position


class OrpheusModel(SpeechModel):
    def __init__(
        self,
        llm: LlamaForCausalLM,
        tokenizer: Any,  # tokenizers.Tokenizer
        detok: SnacDetokenizer,
        name: str = "orpheus",
        constrain_audio_tokens: bool = True,
    ) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.detok = detok
        # Restricting logits to the token range valid at each output position (see
        # constrain_logits) keeps a sampled token from ever being an unusable code.
        self.constrain_audio_tokens = constrain_audio_tokens
        self._stop_ids_cache: torch.Tensor | None = None
        self._audio_rows_cache: torch.Tensor | None = None
        args = llm.args
        if args.vocab_size < T.AUDIO_END:
            raise ModelInputError(
                f"vocab_size {args.vocab_size} is too small for Orpheus audio tokens (needs {T.AUDIO_END})"
            )
        frame_rate = detok.sample_rate / detok.samples_per_frame
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=frame_rate * T.CODES_PER_FRAME,
            stop_token_ids=(T.END_OF_SPEECH,),
            first_chunk_tokens=T.CODES_PER_FRAME * detok.plan.first_audio_frames,
            chunk_tokens=T.CODES_PER_FRAME * detok.plan.chunk_frames,
            large_chunk_tokens=T.CODES_PER_FRAME * detok.plan.large_chunk_frames,
            frame_tokens=T.CODES_PER_FRAME,
            # A chunk's audio lags its codes by the decoder's delay (2.32 frames), rounded up
            # to whole tokens (17): the first chunk's audio is that much shorter than its codes.
            held_back_tokens=math.ceil(
                detok.decoder.delay_samples * T.CODES_PER_FRAME / detok.samples_per_frame
            ),
            voices=VOICES,
            default_voice="tara",
            max_context=args.max_positions,
            # Orpheus's own server defaults.
            sampling_defaults={"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3},
        )
        self.shape = BackboneShape.of(args, llm)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        return Prompt(orpheus_prompt(self.tokenizer, text, voice or self.facts.default_voice))

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.llm(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.llm.compute_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        return self.device_candidates_of(hidden, num_generated, allow_stop)

    def device_candidates(
        self, hidden: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor
    ) -> Candidates:
        """Only the 4096 tokens of the code position each row is at (its output position mod
        7), plus the stop token, which is allowed only at a frame boundary once min_tokens is
        reached. The head is evaluated on the audio rows alone (28673 of 156940), a sixth of
        the full-vocabulary cost. Device tensors alone, so a decode step's head and sampling
        replay as one CUDA graph (engine/sampling_graphs.py)."""
        device = hidden.device
        if not self.constrain_audio_tokens:
            logits = self.llm.compute_logits(hidden)
            stops = self._stop_ids(device)
            logits[:, stops] = torch.where(allow_stop[:, None], logits[:, stops], float("-inf"))
            return Candidates(logits, None)
        audio = self.llm.compute_logits(hidden, rows=self._audio_rows(device))  # [N, 7*4096 + 1]
        positions = steps % T.CODES_PER_FRAME
        columns = positions[:, None] * T.CODEBOOK_SIZE + self._code_range(device)[None, :]
        stop_column = torch.full_like(positions, T.CODES_PER_FRAME * T.CODEBOOK_SIZE)[:, None]
        columns = torch.cat([columns, stop_column], dim=1)  # [N, 4097]
        logits = audio.gather(1, columns)
        stop_ok = allow_stop & (positions == 0)
        logits[:, -1] = torch.where(stop_ok, logits[:, -1], float("-inf"))
        token_ids = torch.where(
            columns < T.CODES_PER_FRAME * T.CODEBOOK_SIZE, columns + T.AUDIO_BASE, T.END_OF_SPEECH
        )
        return Candidates(logits, token_ids)

    def _audio_rows(self, device: torch.device) -> torch.Tensor:
        if self._audio_rows_cache is None or self._audio_rows_cache.device != device:
            rows = list(range(T.AUDIO_BASE, T.AUDIO_END)) + [T.END_OF_SPEECH]
            self._audio_rows_cache = torch.tensor(rows, device=device)
        return self._audio_rows_cache

    def _stop_ids(self, device: torch.device) -> torch.Tensor:
        if self._stop_ids_cache is None or self._stop_ids_cache.device != device:
            self._stop_ids_cache = torch.tensor(self.facts.stop_token_ids, device=device)
        return self._stop_ids_cache

    def _code_range(self, device: torch.device) -> torch.Tensor:
        return torch.arange(T.CODEBOOK_SIZE, device=device)

    def use_fused_kernels(self) -> bool:
        return self.llm.use_fused_kernels()

    def enable_cuda_graphs(self, graphs: Any) -> None:
        self.detok.enable_cuda_graphs(graphs)

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> OrpheusStream:
        return OrpheusStream(snac=self.detok.new_stream())

    def codec_would_emit(self, state: StreamState, new_tokens: int) -> bool:
        """SNAC keeps 2 frames of look-ahead: a listener's new tokens give audio once a whole
        frame is past it. (Past a stream's first chunks SNAC emits whole chunks of 4 frames,
        but a job handed fewer, which the engine does only for a listener about to run dry,
        emits the frames there are: detokenize.)"""
        assert isinstance(state, OrpheusStream)
        frames = (len(state.partial) + new_tokens) // T.CODES_PER_FRAME
        return self.detok.would_emit(state.snac, frames, hurry=True)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[int]], final: list[bool]
    ) -> list[np.ndarray]:
        # A stream handed less than a chunk is decoded early, its listener about to run dry
        # (SnacChunkPlan.hurried).
        plan = self.detok.plan
        hurry = [
            plan.hurried(len(toks) / T.CODES_PER_FRAME, fin)
            for toks, fin in zip(new_tokens, final, strict=True)
        ]
        for state, toks in zip(states, new_tokens, strict=True):
            assert isinstance(state, OrpheusStream)
            frames = []
            for tok in toks:
                code = T.code_of(tok, len(state.partial))
                if code is None:
                    state.dropped_tokens += 1
                    continue
                state.partial.append(code)
                if len(state.partial) == T.CODES_PER_FRAME:
                    frames.append(T.frame_to_snac(state.partial))
                    state.partial = []
            if frames:
                self.detok.push(state.snac, frames)
        return self.detok.decode([s.snac for s in states], final, hurry)  # type: ignore[attr-defined]
