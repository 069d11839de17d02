"""Step-Audio 2 through the four-stage interface: a conversation (text, or speech through the
audio encoder + adapter) → the Qwen2.5-shaped decoder on paged KV → interleaved transcript
text and 25 Hz speech codes (→ token2wav: flow + HiFT, 24 kHz)."""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
from models.interleave import InterleaveConstraint, InterleavedSampling, InterleaveRule
from models.layers.llama import LlamaForCausalLM
from models.step_audio2.audio_encoder import AudioInput
from models.step_audio2.audio_slots import DEFAULT_SLOTS, AudioSlots
from models.step_audio2.prompt import (
    AssistantTurn,
    SpokenAudio,
    ToolResultTurn,
    ToolsMessage,
    Turn,
    UserTurn,
    assistant_text,
    conversation_ids,
    erased,
    tool_call_turn,
    tool_result_turn,
    tools_message,
)
from models.step_audio2.token2wav import FIRST_AUDIO_MARGIN, FIRST_HOP
from models.step_audio2.tokens import StepAudio2Ids
from models.step_audio2.tool_format import tools_json
from models.tool_calls import FunctionTool

CODE_RATE_HZ = 25.0  # speech codes per second of reply audio
SAMPLE_RATE = 24000
# Generated tokens per second of audio: 25 codes plus the transcript's text and filler tokens
# interleaved with them. The ratio is learned, not fixed; this is an estimate for pacing.
TOKENS_PER_SECOND = 30.0
# Step-Audio 2's mix of text and codes is learned, not a published rule (StepFun's report says
# the decoder produces "interleaved sequences of discrete text and audio tokens"; its code
# enforces no ratio). Random weights keep no mix, so random-weights benchmarks sample 1-s
# blocks at the rate above instead: 5 text tokens, then 25 codes (models/interleave.py).
RANDOM_WEIGHTS_INTERLEAVE = InterleaveRule(text=5, speech=25)
assert RANDOM_WEIGHTS_INTERLEAVE.tokens_per_second(CODE_RATE_HZ) == TOKENS_PER_SECOND


@dataclass
class StepAudio2Stream(StreamState):
    codec: Any | None  # the token2wav's stream, None without a token2wav
    text_ids: list[int] = field(default_factory=list)  # the reply's text tokens so far
    codes: int = 0  # speech codes handed to the token2wav


class StepAudio2Model(InterleavedSampling, SpeechModel):
    def __init__(
        self,
        llm: LlamaForCausalLM,
        audio_input: AudioInput | None,
        tokenizer: Any,  # tokenizers.Tokenizer
        token2wav: Any | None,  # token2wav.Token2Wav
        name: str = "step-audio2-mini",
        audio_slots: int = DEFAULT_SLOTS,
        interleave: InterleaveRule | None = None,
    ) -> None:
        """`interleave`: restrict sampling to that block rule (benchmarks with random weights,
        which keep no text/speech mix of their own; None, the default: sample freely)."""
        self.llm, self.audio_input, self.tokenizer = llm, audio_input, tokenizer
        self.token2wav = token2wav
        self.ids = StepAudio2Ids.from_tokenizer(tokenizer)
        args = llm.args
        self.interleave = (
            None
            if interleave is None
            else interleave_constraint(self.ids, tokenizer, args.vocab_size, interleave)
        )
        weight = llm.embed_tokens.weight
        self.slots = AudioSlots(
            args.vocab_size, audio_slots, args.hidden_size, weight.device, weight.dtype
        )
        # Keys of this process's audio turns: a turn prepared by an earlier engine process
        # never matches one of this process's placements.
        self._keys = zip(itertools.repeat(secrets.token_hex(8)), itertools.count())
        lookahead = token2wav.lookahead if token2wav is not None else 3
        self.facts = ModelFacts(
            name=name,
            sample_rate=token2wav.sample_rate if token2wav is not None else SAMPLE_RATE,
            token_rate_hz=TOKENS_PER_SECOND,
            stop_token_ids=self.ids.stop_ids,
            # token2wav's first chunk (its first_hop codes + look-ahead) and its 25-code
            # chunks, counted in generated tokens (codes plus the text between them).
            first_chunk_tokens=int(
                ((token2wav.first_hop if token2wav else FIRST_HOP) + lookahead)
                * TOKENS_PER_SECOND
                / CODE_RATE_HZ
            ),
            chunk_tokens=int(
                (token2wav.chunk if token2wav else 25) * TOKENS_PER_SECOND / CODE_RATE_HZ
            ),
            lookahead_tokens=lookahead,
            # HiFT holds its right-context frames (4 codes' worth) until the next chunk.
            held_back_tokens=int(-(-4 * TOKENS_PER_SECOND // CODE_RATE_HZ)),
            # The first chunk is short (token2wav.FIRST_HOP): it covers the next chunk's wait
            # with this margin rather than the engine's default 3.
            first_audio_margin=FIRST_AUDIO_MARGIN,
            accepts_text=True,
            accepts_audio=audio_input is not None,
            accepts_turns=True,
            system_prompt=True,
            tool_call_syntax="step_audio2",
            max_context=args.max_positions,
            # The reference examples' sampling (stepaudio2.py, web_demo.py).
            sampling_defaults={"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.05},
        )
        self.shape = BackboneShape.of(args, llm)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """A one-turn text conversation (voice is ignored: the token2wav has one voice)."""
        return self.preprocess_turns([UserTurn(text=text)])

    def preprocess_turns(self, turns: Sequence[Turn | ToolsMessage]) -> Prompt:
        return Prompt(conversation_ids(self.tokenizer, self.ids, turns, self.slots.ids_for))

    def user_audio_turns(
        self, pcms_16k: Sequence[np.ndarray], systems: Sequence[str | None] | None = None
    ) -> list[UserTurn | ModelInputError]:
        """Several sessions' turns (float32 mono, 16 kHz; each with its system prompt or None)
        → user turns, every piece of every turn in one batched run of the audio encoder. A turn
        that cannot be served gets its ModelInputError in its place; the others are unharmed."""
        if self.audio_input is None:
            raise ModelInputError("this Step-Audio 2 model was loaded without its audio encoder")
        systems = list(systems) if systems is not None else [None] * len(pcms_16k)
        pcms = [np.asarray(p, np.float32).reshape(-1) for p in pcms_16k]
        usable = [i for i, p in enumerate(pcms) if len(p)]
        embeds = dict(
            zip(usable, self.audio_input.embed_turns([pcms[i] for i in usable]), strict=True)
        )
        out: list[UserTurn | ModelInputError] = []
        for i, system in enumerate(systems):
            e = embeds.get(i)
            if e is None:
                out.append(ModelInputError("the turn's audio is empty: nothing to answer"))
            elif e.shape[0] == 0:
                out.append(
                    ModelInputError("the turn's audio is too short: send at least 80 ms of speech")
                )
            else:
                out.append(UserTurn(audio=SpokenAudio(next(self._keys), e.cpu()), system=system))
        return out

    def warm_up_audio_input(self) -> None:
        """One second of quiet through the mel and the encoder + adapter (SpeechModel's hook)."""
        if self.audio_input is not None:
            self.audio_input.embed_turns([np.zeros(WARM_UP_AUDIO_16K, np.float32)])

    def user_audio_turn(self, pcm_16k: np.ndarray, system: str | None = None) -> UserTurn:
        (turn,) = self.user_audio_turns([pcm_16k], [system])
        if isinstance(turn, ModelInputError):
            raise turn
        return turn

    def user_text_turn(self, text: str, system: str | None = None) -> UserTurn:
        if not text.strip():
            raise ModelInputError("the user turn is empty: give it text or speech")
        return UserTurn(text=text, system=system)

    def tools_turn(self, tools: Sequence[FunctionTool]) -> ToolsMessage:
        """The session's tools, to lead the turns of its requests (the tools message)."""
        return tools_message(tools_json(tools))

    def tool_output_turn(self, outputs: Sequence[str]) -> ToolResultTurn:
        """The results of the last reply's tool calls → the turn that answers them."""
        return tool_result_turn(outputs)

    def tool_call_turn(self, name: str, arguments: str) -> AssistantTurn:
        """A call the client put in the conversation (not one of the model's replies)."""
        return tool_call_turn(self.tokenizer, name, arguments)

    def assistant_text_turn(self, text: str) -> AssistantTurn:
        return assistant_text(self.tokenizer, text)

    def erased_turn(self, turn: Turn) -> Turn:
        if not isinstance(turn, UserTurn | AssistantTurn | ToolResultTurn):
            raise ModelInputError(f"not a {self.facts.name} turn: {type(turn).__name__}")
        return erased(turn)

    def heard_reply(self, output_ids: Sequence[int], heard_s: float | None) -> AssistantTurn:
        """The assistant turn to keep: all of the reply (heard_s None), or on barge-in the
        tokens up to the code that ends the first `heard_s` seconds (25 codes a second)."""
        ids = [int(t) for t in output_ids if t not in self.ids.stop_ids]
        if heard_s is None:
            return AssistantTurn(tuple(ids))
        budget = int(heard_s * CODE_RATE_HZ)
        end, codes = 0, 0
        while end < len(ids) and codes < budget:
            codes += self.ids.code_of(ids[end]) is not None
            end += 1
        return AssistantTurn(tuple(ids[:end]))

    def is_text_token(self, token: Token) -> bool:
        return isinstance(token, int) and self.ids.is_text(token)

    def reply_text(self, output_ids: Sequence[int]) -> str:
        text_ids = [int(t) for t in output_ids if self.ids.is_text(int(t))]
        return self.ids.decode_text(self.tokenizer, text_ids)

    def text_piece(self, token: Token) -> str:
        assert isinstance(token, int)
        return self.ids.decode_text(self.tokenizer, [token]) if self.ids.is_text(token) else ""

    # 2. forward ------------------------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Prompt and generated ids [T] → input embeddings [T, H] (audio slots included)."""
        return self.slots.embed(input_ids, self.llm.embed_tokens)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.llm.forward_embeddings(self.embed(input_ids), positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.llm.compute_logits(hidden)

    def use_fused_kernels(self) -> bool:
        return self.llm.use_fused_kernels()

    # 3. sample: models/interleave.py InterleavedSampling (the default unless the interleave
    # constraint of random-weights benchmarks is on).

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> StepAudio2Stream:
        return StepAudio2Stream(self.token2wav.new_stream() if self.token2wav else None)

    def first_chunk_audio_s(self, tokens: Sequence[Token], more: int = 0) -> float:
        """The token2wav's first audio from the codes among `tokens` (text, filler and markers
        make none), and `more` tokens to come counted at the pacing rate (CODE_RATE_HZ codes
        in TOKENS_PER_SECOND tokens: the mix is learned, not a rule). The token2wav makes
        audio only at its chunk edges, so a few more codes often add none."""
        if self.token2wav is None:
            return 0.0
        codes = sum(1 for t in tokens if self.ids.code_of(t) is not None)  # type: ignore[arg-type]
        codes += int(more * CODE_RATE_HZ // TOKENS_PER_SECOND)
        return self.token2wav.first_audio_s(codes)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Text tokens are kept for the transcript, codes go to the token2wav, filler and
        markers to neither. Without a token2wav (transcript only) no audio is produced."""
        for state, toks in zip(states, new_tokens, strict=True):
            assert isinstance(state, StepAudio2Stream)
            codes = []
            for tok in toks:
                assert isinstance(tok, int)
                code = self.ids.code_of(tok)
                if code is not None:
                    codes.append(code)
                elif self.ids.is_text(tok):
                    state.text_ids.append(tok)
            if codes and state.codec is not None:
                self.token2wav.push(state.codec, codes)
            state.codes += len(codes)
        if self.token2wav is None:
            return [np.zeros(0, np.float32) for _ in states]
        return self.token2wav.decode([s.codec for s in states], final)  # type: ignore[union-attr]

    def enable_cuda_graphs(self, graphs: Any) -> None:
        if self.token2wav is not None:
            self.token2wav.enable_cuda_graphs(graphs)


def interleave_constraint(
    ids: StepAudio2Ids, tokenizer: Any, vocab_size: int, rule: InterleaveRule
) -> InterleaveConstraint:
    """`rule` over Step-Audio 2's vocabulary: text positions draw the text ids (those below
    the first special token), speech positions the codes <audio_0…6560> (neither the filler
    nor <tts_pad>: the constraint models steady speech)."""
    specials = [
        ids.bot,
        ids.eot,
        ids.audio_start,
        ids.audio_end,
        ids.audio_patch,
        ids.tts_start,
        ids.tts_end,
        ids.tts_pad,
        ids.audio_base,
    ]
    end_of_text = tokenizer.token_to_id("<|endoftext|>")  # Qwen's first special, where present
    if end_of_text is not None:
        specials.append(int(end_of_text))
    return InterleaveConstraint(
        rule,
        vocab_size,
        text_ids=range(0, min(specials)),
        speech_ids=range(ids.audio_base, ids.audio_base + ids.num_codes),
        stop_ids=ids.stop_ids,
    )
