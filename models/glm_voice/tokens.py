"""GLM-4-Voice's special tokens and prompt format (THUDM/GLM-4-Voice web_demo.py).

A conversation is one token stream: `[gMASK]<sop>` (the GLM-4 tokenizer's prefix), then
`<|system|>\\n{system prompt}`, then per turn `<|user|>\\n{input}<|assistant|>streaming_transcription\\n`
followed by the model's reply. A spoken input is `<|begin_of_audio|><|audio_i|>…<|end_of_audio|>`
(i: the speech tokenizer's ids, 12.5 per second). The reply interleaves 13 text tokens with 26
audio tokens (the system prompt asks for that ratio; the model is trained on it, nothing
enforces it) and ends with `<|user|>`, the next turn's opener.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.special_tokens import numbered_run, special_id

PREFIX = ("[gMASK]", "<sop>")
SYSTEM, USER, ASSISTANT, OBSERVATION = "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"
END_OF_TEXT = "<|endoftext|>"
BEGIN_OF_AUDIO, END_OF_AUDIO = "<|begin_of_audio|>", "<|end_of_audio|>"
ASSISTANT_MODE = "streaming_transcription\n"

TEXT_TOKENS_PER_BLOCK = 13
AUDIO_TOKENS_PER_BLOCK = 26

SPEECH_SYSTEM_PROMPT = (
    "User will provide you with a speech instruction. Do it step by step. First, think about the "
    "instruction and respond in a interleaved manner, with 13 text token followed by 26 audio "
    "tokens. "
)
TEXT_SYSTEM_PROMPT = (
    "User will provide you with a text instruction. Do it step by step. First, think about the "
    "instruction and respond in a interleaved manner, with 13 text token followed by 26 audio "
    "tokens."
)


def audio_token(i: int) -> str:
    return f"<|audio_{i}|>"


@dataclass(frozen=True)
class GlmVoiceIds:
    """The special ids, resolved by name from the checkpoint's tokenizer (never hard-coded)."""

    prefix: tuple[int, ...]
    system: int
    user: int
    assistant: int
    observation: int
    end_of_text: int
    begin_of_audio: int
    end_of_audio: int
    audio_base: int  # <|audio_0|>; speech token i is audio_base + i
    num_audio: int

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> GlmVoiceIds:
        def need(name: str) -> int:
            return special_id(tokenizer, name, "GLM-4-Voice")

        base, n = numbered_run(tokenizer, audio_token, "GLM-4-Voice")
        return cls(
            prefix=tuple(need(t) for t in PREFIX),
            system=need(SYSTEM),
            user=need(USER),
            assistant=need(ASSISTANT),
            observation=need(OBSERVATION),
            end_of_text=need(END_OF_TEXT),
            begin_of_audio=need(BEGIN_OF_AUDIO),
            end_of_audio=need(END_OF_AUDIO),
            audio_base=base,
            num_audio=n,
        )

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """The reply ends at any of the checkpoint's eos ids: <|endoftext|>, <|user|>, <|observation|>."""
        return (self.end_of_text, self.user, self.observation)

    def is_audio(self, token: int) -> bool:
        return self.audio_base <= token < self.audio_base + self.num_audio
