"""Orpheus through the four-stage interface: prompt → Llama on paged KV → SNAC audio."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from models.base import BackboneShape, ModelFacts, ModelInputError, Prompt, SpeechModel, StreamState
from models.codecs.snac import SnacDetokenizer, SnacStream
from models.layers.llama import LlamaForCausalLM
from models.orpheus import tokens as T

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
MAX_TEXT_CHARS = 4000


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
            n_codebooks=3,
            stop_token_ids=(T.END_OF_SPEECH,),
            first_chunk_tokens=T.CODES_PER_FRAME * detok.first_audio_frames,
            chunk_tokens=T.CODES_PER_FRAME * detok.chunk,
            voices=VOICES,
            default_voice="tara",
            max_context=args.max_positions,
        )
        self.shape = BackboneShape(
            num_layers=args.num_layers,
            num_kv_heads=args.num_kv_heads,
            head_dim=args.head_dim,
            num_q_heads=args.num_heads,
            dtype=next(llm.parameters()).dtype,
        )

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        voice = voice or self.facts.default_voice
        if voice not in VOICES:
            raise ModelInputError(f"unknown voice {voice!r}; choose one of {', '.join(VOICES)}")
        text_ids = self.tokenizer.encode(f"{voice}: {text}").ids
        if not text_ids or text_ids[0] != T.BEGIN_OF_TEXT:
            text_ids = [T.BEGIN_OF_TEXT, *text_ids]
        return Prompt(T.prompt_ids(text_ids))

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.llm(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.llm.compute_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def constrain_logits(
        self, logits: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> torch.Tensor:
        """Keep only the 4096 tokens of the code position each row is at; the stop token only
        at a frame boundary and once min_tokens is reached."""
        if not self.constrain_audio_tokens:
            return super().constrain_logits(logits, num_generated, allow_stop)
        device = logits.device
        offsets = torch.tensor(
            [T.audio_range(n)[0] for n in num_generated], dtype=torch.long, device=device
        )
        index = offsets[:, None] + torch.arange(T.CODEBOOK_SIZE, device=device)[None, :]
        kept = torch.full_like(logits, float("-inf"))
        kept.scatter_(1, index, logits.gather(1, index))
        stop_ok = [ok and n % T.CODES_PER_FRAME == 0 for n, ok in zip(num_generated, allow_stop, strict=True)]
        rows = torch.tensor([i for i, ok in enumerate(stop_ok) if ok], dtype=torch.long, device=device)
        if rows.numel():
            kept[rows, T.END_OF_SPEECH] = logits[rows, T.END_OF_SPEECH]
        return kept

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> OrpheusStream:
        return OrpheusStream(snac=self.detok.new_stream())

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[int]], final: list[bool]
    ) -> list[np.ndarray]:
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
        return self.detok.decode([s.snac for s in states], final)  # type: ignore[attr-defined]
