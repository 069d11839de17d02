"""GLM-4-Voice through the four-stage interface: conversation → GLM-4-9B on paged KV →
interleaved text (transcript) and speech tokens (→ the flow + HiFT decoder, 22.05 kHz)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from models.base import (
    WARM_UP_AUDIO_16K,
    BackboneShape,
    ModelFacts,
    ModelInputError,
    Prompt,
    SpeechModel,
    StreamState,
    Token,
)
from models.glm_voice import tokens as T
from models.glm_voice.prompt import (
    AssistantTurn,
    Turn,
    UserTurn,
    assistant_text,
    conversation_ids,
    erased,
)
from models.glm_voice.tokens import GlmVoiceIds
from models.interleave import InterleaveConstraint, InterleavedSampling, InterleaveRule
from models.layers.llama import LlamaForCausalLM

SPEECH_TOKEN_RATE_HZ = 12.5  # the speech tokenizer's and the decoder's token rate
DECODER_SAMPLE_RATE = 22050
# The reply format GLM-4-Voice is trained on (its system prompt: "13 text token followed by
# 26 audio tokens"): the benchmark-only constraint for random weights (models/interleave.py).
TRAINED_INTERLEAVE = InterleaveRule(T.TEXT_TOKENS_PER_BLOCK, T.AUDIO_TOKENS_PER_BLOCK)


class SpeechTokenDecoder(Protocol):
    """Speech token ids (0..num_audio-1) → 22.05 kHz audio, streamed per request."""

    sample_rate: int

    def new_stream(self) -> Any: ...

    def push(self, stream: Any, tokens: list[int]) -> None: ...

    def decode(self, streams: list[Any], final: list[bool]) -> list[np.ndarray]: ...

    def first_audio_s(self, tokens: int) -> float: ...


@dataclass
class GlmVoiceStream(StreamState):
    decoder: Any | None
    text_ids: list[int] = field(default_factory=list)  # the reply's text tokens so far
    audio_tokens: int = 0  # speech tokens handed to the decoder


class GlmVoiceModel(InterleavedSampling, SpeechModel):
    def __init__(
        self,
        llm: LlamaForCausalLM,
        tokenizer: Any,  # tokenizers.Tokenizer
        decoder: SpeechTokenDecoder | None,
        name: str = "glm-4-voice",
        speech_tokenizer: Any | None = None,  # speech_tokenizer.GlmSpeechTokenizer
        interleave: InterleaveRule | None = None,
    ) -> None:
        """`interleave`: restrict sampling to that block rule (benchmarks with random weights,
        which keep no text/speech mix of their own; None, the default: sample freely)."""
        self.llm, self.tokenizer, self.decoder = llm, tokenizer, decoder
        self.speech_tokenizer = speech_tokenizer
        self.ids = GlmVoiceIds.from_tokenizer(tokenizer)
        args = llm.args
        self.interleave = (
            None
            if interleave is None
            else interleave_constraint(self.ids, args.vocab_size, interleave)
        )
        self.facts = ModelFacts(
            name=name,
            sample_rate=decoder.sample_rate if decoder is not None else DECODER_SAMPLE_RATE,
            # Output tokens per second of audio: 26 speech tokens (2.08 s) per 39 generated.
            token_rate_hz=SPEECH_TOKEN_RATE_HZ
            * (T.TEXT_TOKENS_PER_BLOCK + T.AUDIO_TOKENS_PER_BLOCK)
            / T.AUDIO_TOKENS_PER_BLOCK,
            stop_token_ids=self.ids.stop_ids,
            # The reference demo decodes speech in blocks of 10, 20, then 40 tokens.
            first_chunk_tokens=T.TEXT_TOKENS_PER_BLOCK + 10,
            chunk_tokens=T.TEXT_TOKENS_PER_BLOCK + T.AUDIO_TOKENS_PER_BLOCK,
            accepts_text=True,
            accepts_audio=True,
            accepts_turns=True,
            max_context=args.max_positions,
            sampling_defaults={"temperature": 0.2, "top_p": 0.8},  # the reference demo's
            # Instructions follow the output-format system prompt (models/glm_voice/prompt.py).
            system_prompt=True,
        )
        self.shape = BackboneShape.of(args, llm)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """A one-turn text conversation (voice is ignored: GLM-4-Voice has one voice)."""
        return self.preprocess_turns([UserTurn(text=text)])

    def preprocess_turns(self, turns: Sequence[Turn]) -> Prompt:
        """The whole conversation, ending with the user turn to answer. Earlier turns' ids are
        a prefix of it (see prompt.conversation_ids), for KV prefix reuse."""
        return Prompt(conversation_ids(self.tokenizer, self.ids, turns))

    def warm_up_audio_input(self) -> None:
        """One second of quiet through the speech tokenizer (SpeechModel's hook)."""
        if self.speech_tokenizer is not None:
            self.speech_tokenizer.encode(np.zeros(WARM_UP_AUDIO_16K, np.float32))

    def user_audio_turn(self, pcm_16k: np.ndarray, system: str | None = None) -> UserTurn:
        """A turn's buffered user audio (float32 mono, 16 kHz) → a user turn of speech tokens
        (12.5 per second), with the session's instructions from it on (`system`; None: those
        in force). ModelInputError when there is no speech tokenizer or no tokens."""
        if self.speech_tokenizer is None:
            raise ModelInputError("this GLM-4-Voice model was loaded without its speech tokenizer")
        tokens = self.speech_tokenizer.encode(np.asarray(pcm_16k, dtype=np.float32))
        if not tokens:
            raise ModelInputError("the turn's audio is empty: nothing to answer")
        return UserTurn(speech_tokens=tuple(tokens), system=system)

    def heard_reply(self, output_ids: Sequence[int], heard_s: float | None) -> AssistantTurn:
        """The assistant turn to keep in the history after a reply: all of it (heard_s None),
        or on barge-in only what the user heard: the speech tokens of the first `heard_s`
        seconds (12.5 per second) and the text generated before the last of them."""
        ids = [int(t) for t in output_ids if t not in self.ids.stop_ids]
        if heard_s is None:
            return AssistantTurn(tuple(ids))
        budget = int(heard_s * SPEECH_TOKEN_RATE_HZ)
        end, audio = 0, 0
        while end < len(ids) and audio < budget:
            audio += self.ids.is_audio(ids[end])
            end += 1
        return AssistantTurn(tuple(ids[:end]))

    def user_text_turn(self, text: str, system: str | None = None) -> UserTurn:
        """Typed text as the user's turn (a session may mix it with spoken turns); `system`
        as user_audio_turn's."""
        if not text.strip():
            raise ModelInputError("the user turn is empty: give it text or speech")
        return UserTurn(text=text, system=system)

    def assistant_text_turn(self, text: str) -> AssistantTurn:
        return assistant_text(self.tokenizer, text)

    def erased_turn(self, turn: Turn) -> Turn:
        if not isinstance(turn, UserTurn | AssistantTurn):
            raise ModelInputError(f"not a {self.facts.name} turn: {type(turn).__name__}")
        return erased(turn)

    def is_text_token(self, token: Token) -> bool:
        return not self.ids.is_audio(token) and token not in self.ids.stop_ids

    def reply_text(self, output_ids: Sequence[int]) -> str:
        """The transcript of a reply: its text tokens decoded together (a byte-level piece
        may split a character, so they are not decoded one by one)."""
        text_ids = [
            int(t) for t in output_ids if not self.ids.is_audio(t) and t not in self.ids.stop_ids
        ]
        return self.tokenizer.decode(text_ids, skip_special_tokens=True) if text_ids else ""

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.llm(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.llm.compute_logits(hidden)

    def use_fused_kernels(self) -> bool:
        return self.llm.use_fused_kernels()

    # 3. sample: models/interleave.py InterleavedSampling (the default unless the interleave
    # constraint of random-weights benchmarks is on).

    # output routing ------------------------------------------------------------------------
    def text_piece(self, token: Token) -> str:
        """The transcript text of one generated token ('' for speech and special tokens).
        Byte-level pieces can split a character: join pieces before display."""
        assert isinstance(token, int)
        if self.ids.is_audio(token) or token in self.ids.stop_ids:
            return ""
        return self.tokenizer.decode([token], skip_special_tokens=True)

    def speech_token(self, token: Token) -> int | None:
        """The speech tokenizer id of a generated token, None for text."""
        assert isinstance(token, int)
        return token - self.ids.audio_base if self.ids.is_audio(token) else None

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> GlmVoiceStream:
        return GlmVoiceStream(self.decoder.new_stream() if self.decoder is not None else None)

    def first_chunk_audio_s(self, tokens: Sequence[Token], more: int = 0) -> float:
        """The decoder's first audio from the speech tokens among `tokens` (a reply's first
        13 tokens are text, so generated tokens alone overstate it fourfold), and among `more`
        tokens to come, placed as the trained replies place them (TRAINED_INTERLEAVE: after
        each 26 speech tokens come 13 of text, which make no audio)."""
        if self.decoder is None:
            return 0.0
        speech = sum(1 for t in tokens if self.ids.is_audio(t))
        if more > 0:
            at = len(tokens)
            speech += TRAINED_INTERLEAVE.speech_codes(at + more)
            speech -= TRAINED_INTERLEAVE.speech_codes(at)
        return self.decoder.first_audio_s(speech)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Text tokens are kept for the transcript; speech tokens go to the decoder. Without a
        decoder (transcript-only use of the backbone) no audio is produced."""
        for state, toks in zip(states, new_tokens, strict=True):
            assert isinstance(state, GlmVoiceStream)
            speech = []
            for tok in toks:
                code = self.speech_token(tok)
                if code is not None:
                    speech.append(code)
                elif tok not in self.ids.stop_ids:
                    state.text_ids.append(int(tok))  # type: ignore[arg-type]
            if speech and state.decoder is not None:
                self.decoder.push(state.decoder, speech)  # type: ignore[union-attr]
            state.audio_tokens += len(speech)
        if self.decoder is None:
            return [np.zeros(0, np.float32) for _ in states]
        return self.decoder.decode([s.decoder for s in states], final)  # type: ignore[attr-defined]


def interleave_constraint(
    ids: GlmVoiceIds, vocab_size: int, rule: InterleaveRule
) -> InterleaveConstraint:
    """`rule` over GLM-4-Voice's vocabulary: text positions draw the text ids (those below the
    first special token), speech positions the speech tokens <|audio_i|>."""
    specials = (
        *ids.prefix,
        ids.system,
        ids.user,
        ids.assistant,
        ids.observation,
        ids.end_of_text,
        ids.begin_of_audio,
        ids.end_of_audio,
        ids.audio_base,
    )
    return InterleaveConstraint(
        rule,
        vocab_size,
        text_ids=range(0, min(specials)),
        speech_ids=range(ids.audio_base, ids.audio_base + ids.num_audio),
        stop_ids=ids.stop_ids,
    )
