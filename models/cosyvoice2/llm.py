"""CosyVoice 2's speech-token LM (`Qwen2LM`): a Qwen2 backbone on the engine's paged KV, fed a
mix of text embeddings (Qwen2's own), two special embeddings and speech-token embeddings, with
its own head over the speech codes.

One id space for the engine (ids are plain ints):
    [0, V)                  text tokens, Qwen2's embed_tokens (V = Qwen2's vocab_size)
    V + 0, V + 1            sos and task_id: rows 0 and 1 of `llm_embedding`
    V + 2 + s, s < S + 3    speech token s: row s of `speech_embedding` (S = 6561 codes; S is
                            eos, S + 1 and S + 2 are the other two stop tokens of the head)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from models.checkpoint_errors import CheckpointError, check_state_dict
from models.layers.llama import LlamaArgs, LlamaForCausalLM

QWEN_PREFIX = "llm.model."  # Qwen2Encoder wraps a Qwen2ForCausalLM as `.model`
HEAD_STATE = (
    "llm_embedding.weight",
    "speech_embedding.weight",
    "llm_decoder.weight",
    "llm_decoder.bias",
)


@dataclass(frozen=True)
class SpeechIds:
    """Where each kind of token sits in the engine's id space."""

    text_vocab: int
    speech_token_size: int

    @property
    def sos(self) -> int:
        return self.text_vocab

    @property
    def task_id(self) -> int:
        return self.text_vocab + 1

    @property
    def speech_base(self) -> int:
        return self.text_vocab + 2

    @property
    def num_speech_rows(self) -> int:  # codes + eos + 2 unused stop rows
        return self.speech_token_size + 3

    @property
    def vocab_size(self) -> int:
        return self.speech_base + self.num_speech_rows

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return tuple(self.speech_base + self.speech_token_size + i for i in range(3))

    def speech(self, code: int) -> int:
        return self.speech_base + code

    def code_of(self, token: int) -> int | None:
        """The speech code a generated token stands for; None for stop rows or anything else."""
        code = token - self.speech_base
        return code if 0 <= code < self.speech_token_size else None


class SpeechLM(nn.Module):
    """Parameter names follow llm.pt: `llm.model.model.*` (Qwen2), `llm_embedding`,
    `speech_embedding`, `llm_decoder`."""

    def __init__(self, qwen_args: LlamaArgs, speech_token_size: int) -> None:
        super().__init__()
        hidden = qwen_args.hidden_size
        self.ids = SpeechIds(qwen_args.vocab_size, speech_token_size)
        self.qwen = LlamaForCausalLM(qwen_args)
        self.llm_embedding = nn.Embedding(2, hidden)
        self.speech_embedding = nn.Embedding(self.ids.num_speech_rows, hidden)
        self.llm_decoder = nn.Linear(hidden, self.ids.num_speech_rows)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [T] in the engine's id space → embeddings [T, H]. Three gathers and two selects
        rather than boolean indexing: fixed shapes, no host synchronisation."""
        v = self.ids.text_vocab
        text = self.qwen.embed_tokens(ids.clamp(max=v - 1))
        special = self.llm_embedding((ids - v).clamp(0, 1))
        speech = self.speech_embedding(
            (ids - self.ids.speech_base).clamp(0, self.ids.num_speech_rows - 1)
        )
        x = torch.where((ids < v)[:, None], text, special)
        return torch.where((ids >= self.ids.speech_base)[:, None], speech, x)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        return self.qwen.forward_embeddings(self.embed(ids), positions, attn)

    def speech_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] → float32 logits over the speech head's rows [N, S + 3]."""
        return self.llm_decoder(hidden).float()

    # --- loading ---------------------------------------------------------------------------------
    def load_llm_pt(self, state: dict[str, torch.Tensor]) -> None:
        """llm.pt's state dict; CheckpointError naming anything missing or mis-shaped."""
        qwen = [
            (k.removeprefix(QWEN_PREFIX), t) for k, t in state.items() if k.startswith(QWEN_PREFIX)
        ]
        if not qwen:
            raise CheckpointError(
                f"llm.pt holds no Qwen2 tensors (names starting {QWEN_PREFIX!r}); is it CosyVoice 2's llm.pt?"
            )
        self.qwen.load_hf_weights(_without_text_head(qwen))
        head = {k: t for k, t in state.items() if not k.startswith(QWEN_PREFIX)}
        expected = {k: v for k, v in self.state_dict().items() if k in HEAD_STATE}
        check_state_dict(expected, head, "llm.pt's speech embedding and head tensors")
        self.load_state_dict(head, strict=False)


def _without_text_head(weights: Iterable[tuple[str, torch.Tensor]]):
    # Qwen2's text head is never used (speech tokens come from llm_decoder); a checkpoint saved
    # untied carries it anyway.
    return ((k, t) for k, t in weights if k != "lm_head.weight")
