"""voxgate-tiny through the four-stage interface: normalised characters (or their phones, for a
"voxgate-phones" checkpoint: phone_text.py) → Llama backbone on the
engine's paged KV → codebook 0 from the engine's sampler → depth stage for codebooks 1..K-1 →
streaming VoxCodec audio at 24 kHz."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
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
    TextWord,
    Token,
    block_stops,
)
from models.codecs.voxcodec_stream import VoxCodecDetokenizer, VoxCodecStream
from models.voxgate_tiny.lm import VoxgateTinyLM
from models.voxgate_tiny.phone_text import BOUNDARY, MARKS, PhoneTokenizer, phone_sequence
from models.voxgate_tiny.text import CharTokenizer, normalize

VOICE = "slt"  # the teacher voice it learned (CMU ARCTIC slt through Flite)
# Text symbols that make no sound of their own (the word boundary and the marks phone_text.py
# reads, which the character vocabulary shares): a text that ends in them is said once the
# pointer has passed its last other symbol.
SILENT_SYMBOLS = (BOUNDARY, *MARKS)
# Rows (2 s at two frames a row) with the pointer standing still after which a reading model
# may stop anyway: its pauses last well under a second, so it is stuck, and holding the stop
# back would only make noise up to max_tokens.
STALLED_ROWS = 50
MAX_TEXT_CHARS = 600  # normalised characters; it was trained on sentences of up to ~250
ABSENT = -1
# A word of a character model's normalised text (text.py `normalize`): letters and digits, with
# apostrophes inside ("don't").
_CHAR_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


@dataclass
class VoxgateTinyStream(StreamState):
    codec: VoxCodecStream


class VoxgateTinyModel(SpeechModel):
    def __init__(
        self,
        lm: VoxgateTinyLM,
        tokenizer: CharTokenizer | PhoneTokenizer,
        detok: VoxCodecDetokenizer,
        sampling: dict[str, float],
        name: str = "voxgate-tiny",
        frames_per_row: int = 1,
        first_chunk_rows: int = 1,
        chunk_rows: int = 3,
    ) -> None:
        self.lm = lm
        self.tokenizer = tokenizer
        self.detok = detok
        self.k = lm.num_codebooks
        self.frames_per_row = frames_per_row
        self._silent_ids = frozenset(
            i for i, s in enumerate(tokenizer.symbols) if s in SILENT_SYMBOLS
        )
        if (detok.num_codebooks * frames_per_row, detok.codebook_size) != (
            self.k,
            lm.codebook_size,
        ):
            raise ModelInputError("the codec's codebooks do not match the model's")
        args = lm.args
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=detok.frame_rate / frames_per_row,
            stop_token_ids=(),  # a stop is a row whose codebook 0 is end-of-audio (is_stop)
            # The decoder is causal: audio can start after any row. One row (40 ms at two
            # frames a row) first, three (120 ms) a chunk after that: few CPU decoder calls.
            first_chunk_tokens=first_chunk_rows,
            chunk_tokens=chunk_rows,
            voices=(VOICE,),
            default_voice=VOICE,
            max_context=args.max_positions,
            sampling_defaults=dict(sampling),
            row_width=lm.row_width,
            # The reading pointer says which input symbol each row speaks (lm.py).
            word_timings=lm.reading,
        )
        self.shape = BackboneShape.of(args, lm, lm.codebook_size + 1)

    # 1. preprocess ---------------------------------------------------------------------------
    def prompt_rows(self, text: str) -> list[tuple[int, ...]]:
        """Text → prompt rows (<bos>, characters, <audio>), each (-1 × K, text id) and, with
        reading, an absent next-symbol column and the symbol's own index (absent on <bos> and
        <audio>): the index a frame row's pointer holds while saying it (lm.py)."""
        return self._prompt(text)[0]

    def _prompt(self, text: str) -> tuple[list[tuple[int, ...]], tuple[TextWord, ...]]:
        """prompt_rows, and the text's words with the symbol indices that say them (the
        pointer's unit: reading_position)."""
        said = normalize(text)
        if not said:
            raise ModelInputError("text has nothing speakable: give the model some words")
        if len(said) > MAX_TEXT_CHARS:
            raise ModelInputError(
                f"text is {len(said)} characters once normalised; the limit is {MAX_TEXT_CHARS} "
                "(send one sentence per request)"
            )
        try:
            ids, words = self._symbols(said)
        except (KeyError, ValueError) as exc:  # a phone model whose G2P cannot say a word
            raise ModelInputError(f"cannot turn {said!r} into this model's phones: {exc}") from None
        if not self.lm.reading:
            return [(ABSENT,) * self.k + (t,) for t in ids], ()
        positions = self.lm.pointer_positions
        if positions and len(ids) - 2 > positions:
            raise ModelInputError(
                f"text is {len(ids) - 2} symbols once read; this model knows {positions} "
                "positions (send a shorter sentence)"
            )
        last = len(ids) - 1
        rows = [
            (ABSENT,) * self.k + (t, ABSENT, i - 1 if 0 < i < last else ABSENT)
            for i, t in enumerate(ids)
        ]
        return rows, words

    def _symbols(self, said: str) -> tuple[list[int], tuple[TextWord, ...]]:
        """Normalised text → its ids (<bos>, symbols, <audio>) and its words' symbol spans."""
        if isinstance(self.tokenizer, PhoneTokenizer):
            sequence = phone_sequence(said, self.tokenizer.word_phones)
            spans = zip(sequence.words, sequence.word_spans, strict=True)
            words = tuple(TextWord(word, start, end) for word, (start, end) in spans)
            return self.tokenizer.ids(sequence.symbols), words
        # Characters: symbol i is character i of the normalised text (normalize produces
        # nothing outside the vocabulary).
        words = tuple(TextWord(m.group(), m.start(), m.end()) for m in _CHAR_WORD.finditer(said))
        return self.tokenizer.encode(said), words

    def preprocess(self, text: str, voice: str | None) -> Prompt:
        if voice not in (None, VOICE):
            raise ModelInputError(f"unknown voice {voice!r}; this model has one voice, {VOICE!r}")
        rows, words = self._prompt(text)
        return Prompt(rows, words=words)

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.lm(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm.first_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        logits = self.compute_logits(hidden)
        return Candidates(block_stops(logits, allow_stop, [self.lm.eos]), None)

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        codes, advance = self.lm.depth.generate(hidden, first_tokens, sample)  # [N, K], [N]
        rest = torch.full_like(codes[:, :1], ABSENT).expand(-1, self.lm.row_width - self.k)
        if advance is None:
            return torch.cat([codes, rest], dim=1)
        # The advance waits in the text column for follow_row to turn it into the pointer.
        return torch.cat([codes, advance[:, None], rest[:, 1:]], dim=1)

    def follow_row(self, prompt: Sequence[Token], output: Sequence[Token], token: Token) -> Token:
        """With reading: move the pointer by the sampled advance (never past the last
        character) and write the characters it points at (lm.py's module docstring)."""
        if not self.lm.reading:
            return token
        assert isinstance(token, tuple)
        k, vocab = self.k, self.lm.text_vocab
        last = len(prompt) - 3  # the prompt is <bos>, characters 0..last, <audio>
        before = output[-1][k + 2] if output else 0  # type: ignore[index]
        at = min(before + token[k], last)
        char = prompt[1 + at][k]  # type: ignore[index]
        after = 2 * vocab + prompt[2 + at][k] if at < last else 3 * vocab  # type: ignore[index]
        return (*token[:k], vocab + char, after, at)

    def may_stop(self, prompt: Sequence[Token], output: Sequence[Token]) -> bool:
        """With reading: not before the pointer reaches the text's last sound. Trained on one
        sentence an utterance, the model ends its audio at a sentence's final mark; with more
        than one sentence in a request (`voxgate synth`, or short sentences the gateway joins)
        it would stop after the first and drop the rest. A pointer stalled for STALLED_ROWS
        may stop wherever it is."""
        if not self.lm.reading:
            return True
        k = self.k
        recent = [row[k + 2] for row in output[-1 - STALLED_ROWS :]]  # type: ignore[index]
        at = recent[-1] if recent else 0
        if len(recent) > STALLED_ROWS and recent[0] == at:
            return True  # stalled
        symbols = [row[k] for row in prompt[1:-1]]  # type: ignore[index]
        sounds = [i for i, s in enumerate(symbols) if s not in self._silent_ids]
        return at >= (sounds[-1] if sounds else 0)

    def quantize_for_cpu(self) -> bool:
        """int8 Linear weights for the backbone, its head and the depth stage (models/
        cpu_int8.py); the codec and the embedding tables stay fp32."""
        from models.cpu_int8 import quantize_linears_int8

        self.lm = quantize_linears_int8(self.lm)
        return True

    def reading_position(self, token: Token) -> int | None:
        """The pointer: the input symbol this row's audio says (lm.py; None without reading)."""
        if not self.lm.reading:
            return None
        return token[self.k + 2]  # type: ignore[index]

    def is_stop(self, token: Token) -> bool:
        return token[0] == self.lm.eos  # type: ignore[index]

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> VoxgateTinyStream:
        return VoxgateTinyStream(codec=self.detok.new_stream())

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        for state, rows in zip(states, new_tokens, strict=True):
            assert isinstance(state, VoxgateTinyStream)
            n = self.detok.num_codebooks
            frames = [
                list(row[i : i + n])  # type: ignore[index]
                for row in rows
                if not self.is_stop(row)
                for i in range(0, self.k, n)
            ]
            self.detok.push(state.codec, frames)
        return self.detok.decode([s.codec for s in states])  # type: ignore[attr-defined]
