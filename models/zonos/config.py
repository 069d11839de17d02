"""Zonos v0.1's published facts and its config.json (Zyphra/Zonos-v0.1-transformer and
Zyphra/Zonos-v0.1-hybrid).

config.json holds `backbone` (d_model, n_layer, attn_mlp_d_intermediate, attn_cfg with the head
counts, ssm_cfg: empty for the transformer, mamba-ssm's Mamba2 arguments for the hybrid, whose
attention layers are `attn_layer_idx` and whose Mamba2 layers have no MLP (d_intermediate 0)),
`prefix_conditioner` (the list of conditioners the prefix is built from, in order) and the two
special codes. The codec
is DAC 44.1 kHz (descript/dac_44khz): 9 codebooks of 1024 codes at 44100 / 512 frames a second.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from models.checkpoint_errors import CheckpointError
from models.layers.mamba2 import Mamba2Sizes

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
    # The hybrid: its Mamba2 layers' sizes and which layers are attention (None: all of them,
    # the transformer). mamba-ssm's attention rotates halves unless told to interleave; the
    # transformer's config.json says interleaved.
    ssm: Mamba2Sizes | None = None
    attn_layers: tuple[int, ...] | None = None
    rotary_interleaved: bool = True

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(range(self.n_layer)) if self.attn_layers is None else self.attn_layers


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
            if b.get("ssm_cfg"):
                sizes = _hybrid(sizes, b)
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
        attn_cfg = {
            "causal": True,
            "num_heads": b.num_heads,
            "num_heads_kv": b.num_kv_heads,
            "rotary_emb_dim": b.head_dim,
            "rotary_emb_interleaved": True,
            "qkv_proj_bias": False,
            "out_proj_bias": False,
        }
        if not b.rotary_interleaved:  # the hybrid's config.json leaves mamba-ssm's default
            del attn_cfg["rotary_emb_interleaved"]
        return {
            "backbone": {
                "d_model": b.d_model,
                "d_intermediate": 0,
                "attn_mlp_d_intermediate": b.mlp_hidden,
                "n_layer": b.n_layer,
                "ssm_cfg": b.ssm.to_ssm_cfg() if b.ssm is not None else {},
                "attn_layer_idx": list(b.attention_layers),
                "attn_cfg": attn_cfg,
                "rms_norm": False,
                "residual_in_fp32": False,
                "norm_epsilon": b.norm_eps,
            },
            "prefix_conditioner": {"conditioners": list(self.conditioners), "projection": "linear"},
            "eos_token_id": self.eos,
            "masked_token_id": self.mask,
        }


def _hybrid(sizes: BackboneSizes, b: dict) -> BackboneSizes:
    """The hybrid's fields of config.json's `backbone` on top of the attention sizes."""
    if int(b.get("d_intermediate", 0)) != 0:
        raise CheckpointError(
            "config.json: Voxgate's Zonos hybrid has no MLP after its Mamba2 layers "
            "(d_intermediate must be 0, as published)"
        )
    if b.get("rms_norm") or b.get("residual_in_fp32"):
        raise CheckpointError("config.json: the Zonos hybrid uses LayerNorm, residual in dtype")
    layers = tuple(sorted({int(i) for i in b.get("attn_layer_idx", [])}))
    if any(not 0 <= i < sizes.n_layer for i in layers):
        raise CheckpointError(f"config.json: attn_layer_idx {list(layers)} outside the layers")
    if not layers:
        raise CheckpointError("config.json: the Zonos hybrid needs attention layers")
    return replace(
        sizes,
        ssm=Mamba2Sizes.from_ssm_cfg(sizes.d_model, b["ssm_cfg"]),
        attn_layers=layers,
        # mamba-ssm's MHA: rotary over halves unless rotary_emb_interleaved is set
        rotary_interleaved=bool(b["attn_cfg"].get("rotary_emb_interleaved", False)),
    )


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

# The hybrid's conditioners (config.json of Zyphra/Zonos-v0.1-hybrid): the transformer's, then
# four it was trained with besides (make_cond_dict's defaults: vqscore_8 and dnsmos_ovrl left
# unconditional, ctc_loss 0, speaker_noised 0).
HYBRID_CONDITIONERS: tuple[dict[str, Any], ...] = PUBLISHED_CONDITIONERS + (
    {
        "type": "FourierConditioner",
        "name": "vqscore_8",
        "input_dim": 8,
        "min_val": 0.5,
        "max_val": 0.8,
        "uncond_type": "learned",
    },
    {
        "type": "FourierConditioner",
        "name": "ctc_loss",
        "min_val": -1.0,
        "max_val": 1000,
        "uncond_type": "learned",
    },
    {
        "type": "FourierConditioner",
        "name": "dnsmos_ovrl",
        "min_val": 1,
        "max_val": 5,
        "uncond_type": "learned",
    },
    {
        "type": "IntegerConditioner",
        "name": "speaker_noised",
        "min_val": 0,
        "max_val": 1,
        "uncond_type": "learned",
    },
)
# Zyphra/Zonos-v0.1-hybrid: 46 layers, attention at every 4th from 0, Mamba2 with mamba-ssm's
# defaults elsewhere (d_state 128, d_conv 4, expand 2, headdim 64, one group).
REAL_HYBRID = ZonosConfig(
    replace(
        REAL.backbone,
        n_layer=46,
        ssm=Mamba2Sizes(2048),
        attn_layers=tuple(range(0, 46, 4)),
        rotary_interleaved=False,
    ),
    HYBRID_CONDITIONERS,
)
# Narrowed: two Mamba2 layers between two attention layers, chunks of 8 so a prompt's prefill
# crosses several.
TINY_HYBRID = ZonosConfig(
    replace(
        TINY.backbone,
        n_layer=4,
        ssm=Mamba2Sizes(64, d_state=16, headdim=16, chunk_size=8),
        attn_layers=(0, 3),
        rotary_interleaved=False,
    ),
    HYBRID_CONDITIONERS,
)
