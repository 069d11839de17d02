"""Step-Audio 2's special tokens, chat format and the routing of a reply's tokens
(stepfun-ai/Step-Audio2: stepaudio2.py, web_demo.py; the checkpoint's tokenizer).

A conversation is one token stream of messages `<|BOT|>{role}\\n{content}<|EOT|>`, roles
`system`, `human` and `assistant`. A spoken user turn is `<audio_start>` + one `<audio_patch>`
per adapter embedding (12.5 a second) + `<audio_end>`; the patches' input embeddings are the
audio encoder's, not the vocabulary's. For a spoken reply the assistant message opens with
`<tts_start>` and the model continues it: text tokens (the transcript) and speech tokens
`<audio_i>` (i < 6561: CosyVoice 2's 25 Hz codes) interleaved, with `<tts_pad>` /
`<audio_6561>` as filler where one stream waits for the other, `<tts_end>` when the speech is
done, and `<|EOT|>` at the end. The model learned the interleaving; serving only routes the
tokens: text → transcript, codes → token2wav, filler and markers → neither.

Tool calls (same format, models/step_audio2/tool_format.py): tools go in a
`<|BOT|>tool_json_schemas\\n{json}<|EOT|>` message after the system one, the model calls with
`<tool_call>function\\n{name}\\n{json}</tool_call>` in its reply's text, and results come back as
an `input` message. The reply's transcript keeps the call's tags even where the tokenizer marks
them special, so that the call can be parsed out of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.checkpoint_errors import CheckpointError
from models.special_tokens import numbered_run, special_id
from models.step_audio2.tool_format import CALL_END, CALL_START

BOT, EOT = "<|BOT|>", "<|EOT|>"
AUDIO_START, AUDIO_END, AUDIO_PATCH = "<audio_start>", "<audio_end>", "<audio_patch>"
TTS_START, TTS_END, TTS_PAD = "<tts_start>", "<tts_end>", "<tts_pad>"
SYSTEM_ROLE, USER_ROLE, ASSISTANT_ROLE = "system", "human", "assistant"
NUM_CODES = 6561  # speech codes <audio_0>…<audio_6560>; <audio_6561> is the filler

# The reference demo's system prompt is Chinese and names the assistant; this is a neutral
# English one in the same spirit. `instructions` (Realtime) replace it.
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful voice assistant. Answer briefly and naturally, as in a spoken "
    "conversation. Speak with the default female voice."
)


def audio_token(i: int) -> str:
    return f"<audio_{i}>"


@dataclass(frozen=True)
class StepAudio2Ids:
    """The special ids, resolved by name from the checkpoint's tokenizer (never hard-coded)."""

    bot: int
    eot: int
    audio_start: int
    audio_end: int
    audio_patch: int
    tts_start: int
    tts_end: int
    tts_pad: int
    audio_base: int  # <audio_0>; speech code i is audio_base + i
    num_codes: int  # codes the token2wav decodes (the filler <audio_num_codes> excluded)
    # <tool_call> and </tool_call> by id, where the vocabulary has them as single tokens.
    call_tags: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> StepAudio2Ids:
        def need(name: str) -> int:
            return special_id(tokenizer, name, "Step-Audio 2")

        base, n = numbered_run(tokenizer, audio_token, "Step-Audio 2")
        if n < 2:
            raise CheckpointError("the tokenizer has fewer than two <audio_i> tokens")
        return cls(
            bot=need(BOT),
            eot=need(EOT),
            audio_start=need(AUDIO_START),
            audio_end=need(AUDIO_END),
            audio_patch=need(AUDIO_PATCH),
            tts_start=need(TTS_START),
            tts_end=need(TTS_END),
            tts_pad=need(TTS_PAD),
            audio_base=base,
            num_codes=min(n - 1, NUM_CODES),  # the last <audio_i> is the filler
            call_tags={
                i: tag
                for tag in (CALL_START, CALL_END)
                if (i := tokenizer.token_to_id(tag)) is not None
            },
        )

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return (self.eot,)

    @property
    def markers(self) -> frozenset[int]:
        """Tokens of a reply that are neither transcript nor speech."""
        return frozenset(
            (self.tts_start, self.tts_end, self.tts_pad, self.eot, self.bot, self.audio_patch)
        )

    def code_of(self, token: int) -> int | None:
        """The speech code of a generated token, None for anything else (the filler too)."""
        code = token - self.audio_base
        return code if 0 <= code < self.num_codes else None

    def is_speech_range(self, token: int) -> bool:
        """Any <audio_i>, the filler included."""
        return self.audio_base <= token <= self.audio_base + self.num_codes

    def is_text(self, token: int) -> bool:
        return not self.is_speech_range(token) and token not in self.markers

    def decode_text(self, tokenizer: Any, text_ids: list[int]) -> str:
        """Text tokens → text, special tokens left out except the tool-call tags (a tokenizer
        that marks them special would drop them, and the call with them)."""
        if not self.call_tags:
            return tokenizer.decode(text_ids, skip_special_tokens=True) if text_ids else ""
        out, run = [], []
        for t in text_ids:
            tag = self.call_tags.get(t)
            if tag is None:
                run.append(t)
                continue
            if run:
                out.append(tokenizer.decode(run, skip_special_tokens=True))
            out.append(tag)
            run = []
        if run:
            out.append(tokenizer.decode(run, skip_special_tokens=True))
        return "".join(out)
