"""Moshi through the four-stage interface, full duplex: the user's audio frames are encoded as
they arrive (streaming Mimi encoder), each step runs the temporal transformer on the engine's
paged KV for every live session at once, the engine samples the text column, the depth stage
draws Moshi's 8 codebooks for the whole batch, and the streaming Mimi decoder turns them into
one 80 ms frame per session. Row layout and delays: `rows.py`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from models.base import (
    BackboneShape,
    Candidates,
    CodeSampler,
    ModelFacts,
    ModelInputError,
    Prompt,
    SpeechModel,
    StreamState,
    Token,
)
from models.codecs.mimi import MimiDetokenizer, MimiStream
from models.codecs.mimi_encoder_streaming import EncoderStream, MimiStreamEncoder
from models.moshi import rows as R
from models.moshi.depth import MoshiDepth
from models.moshi.temporal import MoshiTemporal

# kyutai's server leaves these text ids out of the transcript: 0 ends a padding run, 3 pads.
TEXT_PADDING_IDS = (0, 3)


@dataclass
class MoshiStream(StreamState):
    """Output side of a session: the decoder state and codebook 0 of the pending frame."""

    mimi: MimiStream
    previous_semantic: int | None = None


@dataclass
class MoshiInput:
    """Input side of a session: the user's encoder state and the codes of its last two frames."""

    encoder: EncoderStream
    recent: list[list[int]] = field(default_factory=list)


class MoshiModel(SpeechModel):
    def __init__(
        self,
        temporal: MoshiTemporal,
        depth: MoshiDepth,
        tokenizer: Any,  # tokenizers.Tokenizer, or None (transcripts then show ids)
        detok: MimiDetokenizer,
        encoder: MimiStreamEncoder,
        text_vocab: int,
        audio_vocab: int,
        name: str = "moshi",
    ) -> None:
        self.temporal, self.depth, self.tokenizer = temporal, depth, tokenizer
        self.detok, self.encoder = detok, encoder
        self.k = depth.num_codebooks
        self.text_vocab, self.audio_vocab = text_vocab, audio_vocab
        if detok.num_codebooks != self.k or encoder.num_quantizers != self.k:
            raise ModelInputError(f"the codec must use the model's {self.k} codebooks")
        self.samples_per_frame = detok.samples_per_frame
        args = temporal.args
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=detok.frame_rate,
            stop_token_ids=(),  # a conversation ends when the user leaves, never by a token
            first_chunk_tokens=1,
            chunk_tokens=1,
            accepts_text=False,
            accepts_audio=True,
            full_duplex=True,
            max_context=args.max_positions,
            # kyutai's defaults are 0.8 / top-k 250 for audio and 0.7 / top-k 25 for text; the
            # engine has one set per request, so the audio values apply to both.
            sampling_defaults={
                "temperature": 0.8,
                "top_k": 250,
                "top_p": 1.0,
                "repetition_penalty": 1.0,
            },
            row_width=1 + 2 * self.k,
        )
        self.shape = BackboneShape.of(args, temporal, text_vocab)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """A session's prompt is the initial row; Moshi takes no text and has one voice."""
        if text.strip():
            raise ModelInputError("Moshi is speech-to-speech: send audio, not text")
        if voice:
            raise ModelInputError("Moshi has a single voice; leave `voice` unset")
        return Prompt([R.initial_row(self.k, self.text_vocab, self.audio_vocab)])

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.temporal(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.temporal.compute_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        return Candidates(self.compute_logits(hidden), None)  # no stop token to mask

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        codes = self.depth.generate(hidden, first_tokens, sample)  # [N, K]
        user = torch.full_like(codes, R.ABSENT)
        return torch.cat([first_tokens[:, None], codes, user], dim=1)  # [N, 1 + 2K]

    def is_stop(self, token: Token) -> bool:
        return False

    # --- full duplex: the user's audio in ------------------------------------------------------
    def new_input_state(self) -> MoshiInput:
        return MoshiInput(self.encoder.new_stream())

    def encode_input(self, states: list[MoshiInput], frames: list[np.ndarray]) -> None:
        """One frame (`samples_per_frame` float32 samples at facts.sample_rate) per session,
        encoded together; the codes wait in each state for `next_input_row`."""
        codes = self.encoder.encode([s.encoder for s in states], frames)
        for state, frame_codes in zip(states, codes, strict=True):
            state.recent = (state.recent + [frame_codes[0].tolist()])[-2:]

    def next_input_row(self, state: MoshiInput, sampled: Token, position: int) -> Token:
        """The row sampled at `position` completed with the user's newest frame: the input of
        position + 1."""
        assert isinstance(sampled, tuple)
        prev = state.recent[-2] if len(state.recent) == 2 else None
        return R.next_input_row(sampled, position, state.recent[-1], prev, self.audio_vocab)

    def text_piece(self, token: Token) -> str:
        """The transcript text of a sampled row's text token ('' for padding)."""
        assert isinstance(token, tuple)
        text_id = token[R.TEXT]
        if text_id in TEXT_PADDING_IDS or not 0 <= text_id < self.text_vocab:
            return ""
        piece = self.tokenizer.id_to_token(text_id) if self.tokenizer is not None else None
        if piece is None or (piece.startswith("<") and piece.endswith(">")):
            return ""
        return piece.replace("\u2581", " ")

    # 4. postprocess --------------------------------------------------------------------------
    def enable_cuda_graphs(self, graphs: Any) -> None:
        """Both Mimi halves replay their per-bucket calls from the engine's graphs (captured
        by `warm_up_batches`): each is hundreds of small kernels a frame, launched eagerly."""
        self.encoder.enable_cuda_graphs(graphs)
        self.detok.enable_cuda_graphs(graphs)

    def warm_up_batches(self, max_batch: int) -> None:
        self.encoder.warm_up_batches(max_batch)
        self.detok.warm_up_batches(max_batch, frames=(1,))

    def new_stream_state(self) -> MoshiStream:
        return MoshiStream(mimi=self.detok.new_stream())

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Sampled rows → Moshi's audio, undoing the acoustic delay: each row completes the
        frame whose codebook 0 came with the row before."""
        for state, sampled in zip(states, new_tokens, strict=True):
            assert isinstance(state, MoshiStream)
            frames = []
            for row in sampled:
                assert isinstance(row, tuple)
                frame = R.undelay(state.previous_semantic, row, self.k)
                if frame is not None:
                    frames.append(frame)
                state.previous_semantic = row[R.MOSHI]
            self.detok.push(state.mimi, frames)
        return self.detok.decode([s.mimi for s in states])  # type: ignore[attr-defined]
