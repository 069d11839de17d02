"""Qwen3-TTS's talker on the engine's paged KV cache: Qwen3 decoder layers over rows that
sum a codec frame's embeddings and a projected text embedding, and the codebook-0 head.

A row is (code_0 … code_15, text): code_0 embeds through the talker's codec table (it also
holds the control ids: pad, bos, think…, speakers, languages), code_i (i ≥ 1) through the
code predictor's table i-1, and the text id through the text table then `text_projection`
(a two-layer MLP from the text width to the talker's). Negative columns are absent. The
talker's multimodal RoPE has equal temporal/height/width positions for text and speech, which
makes it the ordinary 1-D RoPE of its frequencies, so the shared Llama rotary applies.
"""

from __future__ import annotations

import threading
from collections import deque

import torch
import torch.nn.functional as F
from torch import nn

from models.base import ModelInputError
from models.layers.llama import (
    DecoderLayer,
    LlamaArgs,
    RMSNorm,
    fused_kernels_for,
    hf_layer_targets,
    run_decoder_stack,
)
from models.layers.rope import RopeSpec, Rotary


def rope_theta(cfg: dict) -> float:
    """RoPE's base as transformers 4 (`rope_theta`, or inside `rope_scaling`) or 5
    (`rope_parameters`) writes it."""
    for holder in (cfg, cfg.get("rope_parameters") or {}, cfg.get("rope_scaling") or {}):
        if holder.get("rope_theta") is not None:
            return float(holder["rope_theta"])
    return 10000.0


def qwen3_args(cfg: dict) -> LlamaArgs:
    """LlamaArgs of a Qwen3-TTS transformer config (talker or code predictor)."""
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return LlamaArgs(
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=hidden,
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope=RopeSpec(theta=rope_theta(cfg)),
        tie_word_embeddings=False,
        max_positions=int(cfg.get("max_position_embeddings", 32768)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        qk_norm=True,
    )


class TextProjection(nn.Module):
    """The text embeddings' resize MLP (`linear_fc1` → SiLU → `linear_fc2`, with biases)."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden)
        self.linear_fc2 = nn.Linear(text_hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class Talker(nn.Module):
    def __init__(self, cfg: dict) -> None:
        super().__init__()
        self.args = args = qwen3_args(cfg)
        self.num_codebooks = int(cfg["num_code_groups"])
        code_vocab = int(cfg["code_predictor_config"]["vocab_size"])
        self.code_vocab = code_vocab
        self.codec_embedding = nn.Embedding(args.vocab_size, args.hidden_size)
        self.text_embedding = nn.Embedding(
            int(cfg["text_vocab_size"]), int(cfg["text_hidden_size"])
        )
        self.text_projection = TextProjection(int(cfg["text_hidden_size"]), args.hidden_size)
        # Codebooks 1..15 of every frame in one table (the code predictor's 15 tables stacked):
        # codebook i's code c sits at (i-1)·code_vocab + c.
        self.residual_embedding = nn.Embedding(
            (self.num_codebooks - 1) * code_vocab, args.hidden_size
        )
        self.register_buffer(
            "offsets", torch.arange(self.num_codebooks - 1) * code_vocab, persistent=False
        )
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(args.rope, args.head_dim)
        self.codec_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.kernels = None  # FlashInfer's fused kernels once use_fused_kernels() ran
        # Cloned voices' x-vectors [slots, H]: a row whose code_0 is vocab_size + i embeds as
        # slot i's x-vector, in the place of a preset speaker's codec id. Base models reserve
        # the slots once (reserve_voices), so the table never moves: captured CUDA graphs read
        # it where it is, and voices come and go (clients') by filling and freeing slots.
        self.register_buffer("voices", torch.zeros(0, args.hidden_size), persistent=False)
        self._free_slots: deque[int] = deque()
        self._slots_lock = threading.Lock()  # clients' voices come and go on other threads

    def reserve_voices(self, slots: int) -> None:
        """Make the table of `slots` voices, on the talker's device and dtype (before
        serving: a voice added after it is a slot filled)."""
        weight = self.codec_embedding.weight
        self.voices = torch.zeros(slots, self.args.hidden_size, device=weight.device,
                                  dtype=weight.dtype)  # fmt: skip
        self._free_slots = deque(range(slots))

    def add_voice(self, xvector: torch.Tensor) -> int:
        """Register an x-vector [H] in a free slot; returns the code_0 id that stands for it.
        Slots are taken in the order they were freed, so a slot just freed is the last to be
        filled again (a request admitted with a removed voice reads it at its prefill)."""
        with self._slots_lock:
            if not self._free_slots:
                raise ModelInputError(
                    f"the model holds {len(self.voices)} cloned voices, its most: remove one"
                )
            slot = self._free_slots.popleft()
        with torch.no_grad():
            self.voices[slot] = xvector.to(self.voices.device, self.voices.dtype)
        return self.args.vocab_size + slot

    def remove_voice(self, row: int) -> None:
        """Free the slot of the voice whose code_0 is `row`."""
        with self._slots_lock:
            self._free_slots.append(row - self.args.vocab_size)

    def embed(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [T, K+1] → [T, H]: the sum of the embeddings of each row's present columns."""
        k = self.num_codebooks
        first, rest, text = rows[:, 0], rows[:, 1:k], rows[:, k]
        dtype = self.codec_embedding.weight.dtype
        vocab = self.args.vocab_size
        is_code = (first >= 0) & (first < vocab)
        x = self.codec_embedding(first.clamp(0, vocab - 1)) * is_code[:, None].to(dtype)
        if len(self.voices):
            voice = (first - vocab).clamp(0, len(self.voices) - 1)
            x = x + self.voices[voice] * (first >= vocab)[:, None].to(dtype)
        residual = self.residual_embedding(rest.clamp(min=0) + self.offsets)  # [T, K-1, H]
        x = x + (residual * (rest >= 0)[..., None].to(dtype)).sum(dim=1)
        words = self.text_projection(self.text_embedding(text.clamp(min=0)))
        return x + words * (text >= 0)[:, None].to(dtype)

    def use_fused_kernels(self) -> bool:
        """FlashInfer's fused norm/RoPE/activation kernels in the layers, where they apply
        (models/layers/llama.py, fused_kernels_for); returns whether they do."""
        self.kernels = fused_kernels_for(self.args, self.rotary, self.codec_head.weight)
        return self.kernels is not None

    def forward(self, rows: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        """rows [T, K+1], positions [T] → hidden [T, H] after the final norm."""
        return run_decoder_stack(
            self.embed(rows), positions, self.layers, self.rotary, self.norm, attn, self.kernels
        )

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.codec_head.weight).float()

    def hf_targets(self) -> dict[str, torch.Tensor]:
        """Published tensor name → the parameter (or part of it) it fills."""
        targets = hf_layer_targets(self.layers, self.args, "talker.model.layers.")
        targets.update(
            {
                "talker.model.codec_embedding.weight": self.codec_embedding.weight,
                "talker.model.text_embedding.weight": self.text_embedding.weight,
                "talker.model.norm.weight": self.norm.weight,
                "talker.codec_head.weight": self.codec_head.weight,
            }
        )
        for name, param in self.text_projection.named_parameters():
            targets[f"talker.text_projection.{name}"] = param
        v = self.code_vocab
        for i in range(self.num_codebooks - 1):
            part = self.residual_embedding.weight.narrow(0, i * v, v)
            targets[f"talker.code_predictor.model.codec_embedding.{i}.weight"] = part
        return targets
