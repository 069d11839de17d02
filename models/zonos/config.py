"""Zonos v0.1's published facts and its config.json (Zyphra/Zonos-v0.1-transformer).

config.json holds `backbone` (d_model, n_layer, attn_mlp_d_intermediate, attn_cfg with the head
counts, ssm_cfg: empty for the transformer, Mamba2 for the hybrid), `prefix_conditioner` (the
list of conditioners the prefix is built from, in order) and the two special codes. The codec
is DAC 44.1 kHz (descript/dac_44khz): 9 codebooks of 1024 codes at 44100 / 512 frames a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.checkpoint_errors import CheckpointError

N_CODEBOOKS = 9
CODEBOOK_SIZE = 1024
EOS_CODE = 1024  # config.json eos_token_id: codebook 0 ends the utterance with it
MASK_CODE = 1025  # config.json masked_token_id: the delay pattern's filler
EMBED_ROWS = 1026  # each codebook's embedding table: codes, EOS, mask
HEAD_ROWS = 1025  # each codebook's head: codes and EOS (the mask is never predicted)
SAMPLE_RATE = 44_100
HOP = 512
TRANSFORMER_REPO = "Zyphra/Zonos-v0.1-transformer"
HYBRID_REPO = "Zyphra/Zonos-v0.1-hybrid"
DAC_REPO = "descript/dac_44khz"


@dataclass(frozen=True)
class BackboneSizes:
    d_model: int
    n_layer: int
    mlp_hidden: int  # attn_mlp_d_intermediate: fc1 maps d_model to 2x this (value and gate)
    num_heads: int
    num_kv_heads: int
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


@dataclass(frozen=True)
class ZonosConfig:
    backbone: BackboneSizes
    conditioners: tuple[dict[str, Any], ...]  # prefix_conditioner.conditioners, as published
    eos: int = EOS_CODE
    mask: int = MASK_CODE

    @classmethod
    def from_dict(cls, cfg: dict) -> ZonosConfig:
        try:
            b, prefix = cfg["backbone"], cfg["prefix_conditioner"]
            if b.get("ssm_cfg"):
                raise CheckpointError(
                    "this is the Zonos hybrid (Mamba2 SSM layers, ssm_cfg in config.json); "
                    "Voxgate serves the transformer backbone only (Zyphra/Zonos-v0.1-transformer)"
                )
            attn = b["attn_cfg"]
            d_model = int(b["d_model"])
            if int(attn.get("rotary_emb_dim", d_model // int(attn["num_heads"]))) != (
                d_model // int(attn["num_heads"])
            ):
                raise CheckpointError("config.json: Zonos rotates whole heads (rotary_emb_dim)")
            sizes = BackboneSizes(
                d_model=d_model,
                n_layer=int(b["n_layer"]),
                mlp_hidden=int(b["attn_mlp_d_intermediate"]),
                num_heads=int(attn["num_heads"]),
                num_kv_heads=int(attn["num_heads_kv"]),
                norm_eps=float(b.get("norm_epsilon", 1e-5)),
            )
            if prefix.get("projection", "none") != "linear":
                raise CheckpointError("config.json: the prefix projection must be 'linear'")
            conditioners = tuple(dict(c) for c in prefix["conditioners"])
        except KeyError as missing:
            raise CheckpointError(f"config.json lacks the Zonos field {missing}") from None
        if int(cfg.get("eos_token_id", EOS_CODE)) != EOS_CODE or int(
            cfg.get("masked_token_id", MASK_CODE)
        ) != (MASK_CODE):
            raise CheckpointError("config.json: Zonos v0.1 uses eos 1024 and mask 1025")
        return cls(sizes, conditioners)

    def to_dict(self) -> dict:
        b = self.backbone
        return {
            "backbone": {
                "d_model": b.d_model,
                "d_intermediate": 0,
                "attn_mlp_d_intermediate": b.mlp_hidden,
                "n_layer": b.n_layer,
                "ssm_cfg": {},
                "attn_layer_idx": list(range(b.n_layer)),
                "attn_cfg": {
                    "causal": True,
                    "num_heads": b.num_heads,
                    "num_heads_kv": b.num_kv_heads,
                    "rotary_emb_dim": b.head_dim,
                    "rotary_emb_interleaved": True,
                    "qkv_proj_bias": False,
                    "out_proj_bias": False,
                },
                "rms_norm": False,
                "residual_in_fp32": False,
                "norm_epsilon": b.norm_eps,
            },
            "prefix_conditioner": {"conditioners": list(self.conditioners), "projection": "linear"},
            "eos_token_id": self.eos,
            "masked_token_id": self.mask,
        }


# The transformer checkpoint's conditioners (config.json of Zyphra/Zonos-v0.1-transformer).
PUBLISHED_CONDITIONERS: tuple[dict[str, Any], ...] = (
    {"type": "EspeakPhonemeConditioner", "name": "espeak"},
    {
        "type": "PassthroughConditioner",
        "name": "speaker",
        "cond_dim": 128,
        "uncond_type": "learned",
        "projection": "linear",
    },
    {"type": "FourierConditioner", "name": "emotion", "input_dim": 8, "uncond_type": "learned"},
    {
        "type": "FourierConditioner",
        "name": "fmax",
        "min_val": 0,
        "max_val": 24000,
        "uncond_type": "learned",
    },
    {
        "type": "FourierConditioner",
        "name": "pitch_std",
        "min_val": 0,
        "max_val": 400,
        "uncond_type": "learned",
    },
    {
        "type": "FourierConditioner",
        "name": "speaking_rate",
        "min_val": 0,
        "max_val": 40,
        "uncond_type": "learned",
    },
    {
        "type": "IntegerConditioner",
        "name": "language_id",
        "min_val": -1,
        "max_val": 126,
        "uncond_type": "learned",
    },
)

REAL = ZonosConfig(
    BackboneSizes(
        d_model=2048, n_layer=26, mlp_hidden=8192, num_heads=16, num_kv_heads=4, norm_eps=1e-5
    ),
    PUBLISHED_CONDITIONERS,
)
TINY = ZonosConfig(
    BackboneSizes(
        d_model=64, n_layer=2, mlp_hidden=128, num_heads=4, num_kv_heads=2, norm_eps=1e-5
    ),
    PUBLISHED_CONDITIONERS,
)
