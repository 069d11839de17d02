"""Chatterbox's fixed facts and T3's sizes.

The published checkpoint (`ResembleAI/chatterbox`) carries no configuration: the official
package hard-codes it (T3Config, LLAMA_CONFIGS["Llama_520M"], S3Token2Wav). The facts that
shape the networks are written here once; T3's sizes are read off the tensors, so the same
loader serves the real checkpoint and the scaled-down tiny preset."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.chatterbox.layout import (  # noqa: F401 - the file names live in the light module
    CHECKPOINT_FILES,
    CONDS_FILE,
    S3GEN_FILE,
    T3_FILE,
    TOKENIZER_FILE,
    VE_FILE,
)
from models.checkpoint_errors import CheckpointError
from models.layers.llama import LlamaArgs
from models.layers.rope import RopeSpec

SAMPLE_RATE = 24000  # S3GEN_SR
TOKEN_RATE = 25  # S3 speech tokens per second
SPEECH_CODES = 6561  # S3 tokenizer codes; the flow's vocabulary


@dataclass(frozen=True)
class T3Facts:
    """T3Config.english_only() and the Llama_520M settings the sizes do not show."""

    start_text: int = 255
    stop_text: int = 0
    start_speech: int = 6561
    stop_speech: int = 6562
    speech_cond_prompt_len: int = 150  # reference speech tokens in the conditioning
    speaker_embed_size: int = 256  # the voice encoder's embedding
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope: RopeSpec = RopeSpec(
        theta=500000.0,
        kind="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_positions=8192,
    )
    max_positions: int = 131072
    perceiver_heads: int = 4


T3_FACTS = T3Facts()


@dataclass(frozen=True)
class SamplingDefaults:
    """ChatterboxTTS.generate's defaults (the published ones)."""

    temperature: float = 0.8
    top_p: float = 1.0
    min_p: float = 0.05
    repetition_penalty: float = 1.2
    cfg_weight: float = 0.5
    exaggeration: float = 0.5
    max_new_tokens: int = 1000


SAMPLING = SamplingDefaults()


@dataclass(frozen=True)
class T3Sizes:
    hidden: int
    layers: int
    intermediate: int
    kv_heads: int
    text_vocab: int
    speech_vocab: int
    text_positions: int
    speech_positions: int
    perceiver_queries: int
    backbone_vocab: int  # the unused `tfmr.embed_tokens` rows (8 in the real checkpoint)

    @property
    def heads(self) -> int:
        return self.hidden // T3_FACTS.head_dim

    def llama_args(self) -> LlamaArgs:
        return LlamaArgs(
            vocab_size=self.backbone_vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_layers=self.layers,
            num_heads=self.heads,
            num_kv_heads=self.kv_heads,
            head_dim=T3_FACTS.head_dim,
            rms_norm_eps=T3_FACTS.rms_norm_eps,
            rope=T3_FACTS.rope,
            tie_word_embeddings=True,  # no text head on the backbone: T3 has its own heads
            max_positions=T3_FACTS.max_positions,
        )


# Llama_520M + T3Config.english_only(): 30 layers of 1024, 704 text and 8194 speech rows,
# learned positions for 2048 + 2 text and 4096 + 4 speech tokens, 32 perceiver queries.
REAL_T3 = T3Sizes(1024, 30, 4096, 16, 704, 8194, 2050, 4100, 32, 8)
# The tiny preset: two heads of the real 64 dims, the real vocabularies and special ids.
TINY_T3 = T3Sizes(128, 2, 256, 2, 704, 8194, 2050, 4100, 32, 8)


def _shape(state: dict[str, torch.Tensor], key: str) -> tuple[int, ...]:
    try:
        return tuple(state[key].shape)
    except KeyError:
        raise CheckpointError(f"{T3_FILE} lacks the tensor {key!r}") from None


def t3_sizes(state: dict[str, torch.Tensor]) -> T3Sizes:
    """T3's sizes read off t3_cfg.safetensors' tensors."""
    text_vocab, hidden = _shape(state, "text_emb.weight")
    if hidden % T3_FACTS.head_dim:
        raise CheckpointError(f"T3 width {hidden} is not a multiple of {T3_FACTS.head_dim}")
    layers = 0
    while f"tfmr.layers.{layers}.input_layernorm.weight" in state:
        layers += 1
    if layers == 0:
        raise CheckpointError(f"{T3_FILE} holds no Llama layers (tfmr.layers.N.*)")
    kv_rows = _shape(state, "tfmr.layers.0.self_attn.k_proj.weight")[0]
    return T3Sizes(
        hidden=hidden,
        layers=layers,
        intermediate=_shape(state, "tfmr.layers.0.mlp.gate_proj.weight")[0],
        kv_heads=kv_rows // T3_FACTS.head_dim,
        text_vocab=text_vocab,
        speech_vocab=_shape(state, "speech_emb.weight")[0],
        text_positions=_shape(state, "text_pos_emb.emb.weight")[0],
        speech_positions=_shape(state, "speech_pos_emb.emb.weight")[0],
        perceiver_queries=_shape(state, "cond_enc.perceiver.pre_attention_query")[1],
        backbone_vocab=_shape(state, "tfmr.embed_tokens.weight")[0],
    )
