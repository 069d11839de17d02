"""The 12 Hz speech tokenizer's decoder (Qwen3-TTS-Tokenizer-12Hz, speech_tokenizer/ in a
Qwen3-TTS checkpoint): 16 codebooks per 80 ms frame → 1920 samples at 24 kHz, streamed.

codes → split RVQ (codebook 0, then 1..15, each summed and projected) → causal conv →
sliding-window transformer → two ×2 upsamplings (transposed conv + ConvNeXt) → conv → four
upsampling blocks (×8, ×5, ×4, ×3; Snake + transposed conv + dilated residual units) → Snake →
conv → clamp to [-1, 1]. Every block is causal (codec_layers.py), so a stream decodes frame by
frame with its per-block cache and gives exactly the whole-utterance samples.

Module and parameter names follow the published checkpoint (`decoder.` prefix in
speech_tokenizer/model.safetensors), so its tensors load by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.codecs.audible_weights import scale_output, unit_gain_convs
from models.layers.llama import RMSNorm
from models.layers.rope import RopeSpec, Rotary
from models.qwen3_tts.codec_layers import (
    Cache,
    CausalConv,
    CausalTransposedConv,
    ConvNeXtBlock,
    DecoderBlock,
    SlidingAttention,
    SnakeBeta,
)
from models.qwen3_tts.talker import rope_theta


@dataclass(frozen=True)
class DecoderConfig:
    codebook_size: int
    codebook_dim: int
    num_quantizers: int
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int

    @classmethod
    def from_json(cls, cfg: dict) -> DecoderConfig:
        return cls(
            codebook_size=int(cfg["codebook_size"]),
            codebook_dim=int(cfg["codebook_dim"]),
            num_quantizers=int(cfg["num_quantizers"]),
            latent_dim=int(cfg["latent_dim"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=int(cfg["num_attention_heads"]),
            num_kv_heads=int(cfg["num_key_value_heads"]),
            sliding_window=int(cfg["sliding_window"]),
            rope_theta=rope_theta(cfg),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            upsample_rates=tuple(cfg["upsample_rates"]),
            upsampling_ratios=tuple(cfg["upsampling_ratios"]),
            decoder_dim=int(cfg["decoder_dim"]),
        )

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * math.prod(self.upsampling_ratios)


class Codebook(nn.Module):
    """EMA codebook as stored: centroid = embedding_sum / cluster_usage."""

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def centroids(self) -> torch.Tensor:
        return self.embedding_sum / self.cluster_usage.clamp(min=1e-5)[:, None]


class _Quantizers(nn.Module):
    def __init__(self, n: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Module() for _ in range(n))
        for layer in self.layers:
            layer._codebook = Codebook(size, dim)


class ResidualQuantizer(nn.Module):
    """n codebooks summed, then a 1×1 conv to the codec's width."""

    def __init__(self, n: int, size: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.vq = _Quantizers(n, size, dim)
        self.output_proj = nn.Conv1d(dim, out_dim, 1, bias=False)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, T] → [B, out_dim, T]."""
        total = sum(
            F.embedding(codes[:, i], layer._codebook.centroids())
            for i, layer in enumerate(self.vq.layers)
        )
        return self.output_proj(total.transpose(1, 2))


class SplitQuantizer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        dim = cfg.codebook_dim // 2
        self.rvq_first = ResidualQuantizer(1, cfg.codebook_size, dim, cfg.codebook_dim)
        self.rvq_rest = ResidualQuantizer(
            cfg.num_quantizers - 1, cfg.codebook_size, dim, cfg.codebook_dim
        )

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.rvq_first.decode(codes[:, :1]) + self.rvq_rest.decode(codes[:, 1:])


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))


class GatedMLP(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, inner, bias=False)
        self.up_proj = nn.Linear(dim, inner, bias=False)
        self.down_proj = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = SlidingAttention(h, cfg.num_heads, cfg.num_kv_heads, cfg.sliding_window)
        self.self_attn_layer_scale = LayerScale(h)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(h)

    def forward(self, x, cos, sin, starts: torch.Tensor, cache: Cache) -> torch.Tensor:
        a = self.self_attn(self.input_layernorm(x), cos, sin, starts, cache)
        x = x + self.self_attn_layer_scale.scale * a
        return x + self.mlp_layer_scale.scale * self.mlp(self.post_attention_layernorm(x))


class PreTransformer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        head_dim = cfg.hidden_size // cfg.num_heads
        self.rotary = Rotary(RopeSpec(theta=cfg.rope_theta), head_dim)

    def forward(self, x: torch.Tensor, starts: torch.Tensor, cache: Cache) -> torch.Tensor:
        """x [B, T, latent], row b at frames starts[b].. → [B, T, latent]."""
        positions = starts[:, None] + torch.arange(x.shape[1], device=x.device)  # [B, T]
        cos, sin = self.rotary.cos_sin(positions.reshape(-1), x.dtype)
        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, starts, cache)
        return self.output_proj(self.norm(h))


class Upsample(nn.ModuleList):
    def __init__(self, dim: int, factor: int) -> None:
        super().__init__([CausalTransposedConv(dim, dim, factor, factor), ConvNeXtBlock(dim)])


class SpeechDecoder(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.quantizer = SplitQuantizer(cfg)
        self.pre_conv = CausalConv(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = PreTransformer(cfg)
        self.upsample = nn.ModuleList(Upsample(cfg.latent_dim, r) for r in cfg.upsampling_ratios)
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [
                CausalConv(cfg.latent_dim, cfg.decoder_dim, 7),
                *(
                    DecoderBlock(dims[i], dims[i + 1], rate)
                    for i, rate in enumerate(cfg.upsample_rates)
                ),
                SnakeBeta(dims[-1]),
                CausalConv(dims[-1], 1, 7),
            ]
        )

    def repeated_blocks(self) -> list[nn.Module]:
        """The Snake activations: what --compile-codec compiles (cuda_graphs.compile_regions:
        one program for all of them), each a fused kernel in a replay where eager runs ~8
        elementwise ones. Measured on an H100 at the 1.7B decoder's shape, a steady job of
        28 streams × 4 frames takes 15.2 ms compiled against 19.3 ms eager
        (bench/qwen3_codec_profile.py)."""
        return [m for m in self.modules() if isinstance(m, SnakeBeta)]

    def state_layout(self) -> list[tuple[int, tuple[int, ...]]]:
        """(cache key, per-stream shape) of every block with a past, in module order: a
        stream's whole decoder state (codec_streams.py keeps it as one row)."""
        return [
            (id(m), shape)
            for m in self.modules()
            if hasattr(m, "history_shape") and (shape := m.history_shape()) is not None
        ]

    def run(self, codes: torch.Tensor, starts: torch.Tensor, cache: Cache) -> torch.Tensor:
        """codes [B, num_quantizers, T], row b the next T frames of a stream that has decoded
        starts[b] frames and whose blocks' pasts are `cache` (batched; a key absent is a past
        of zeros, a new stream's) → audio [B, T·1920] in [-1, 1]; `cache` now holds the pasts
        after these frames."""
        h = self.pre_conv(self.quantizer.decode(codes), cache).transpose(1, 2)
        h = self.pre_transformer(h, starts, cache).transpose(1, 2)
        for block in self.upsample:
            for layer in block:
                h = layer(h, cache)
        for layer in self.decoder:
            h = layer(h, cache)
        return h[:, 0].clamp(-1.0, 1.0)

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Whole utterances: codes [B, num_quantizers, T] from their first frame → audio
        [B, T·1920] in [-1, 1]. Streams decode in pieces through codec_streams.py."""
        starts = torch.zeros(codes.shape[0], dtype=torch.long, device=codes.device)
        return self.run(codes, starts, {})

    def load_published(self, tensors: dict[str, torch.Tensor]) -> None:
        """Load speech_tokenizer/model.safetensors' `decoder.` tensors (the encoder's, and the
        quantizers' input projections, which only encoding uses, are not needed)."""
        from models.checkpoint_errors import CheckpointError

        wanted = self.state_dict()
        missing = [name for name in wanted if f"decoder.{name}" not in tensors]
        if missing:
            raise CheckpointError(
                f"the speech tokenizer checkpoint lacks {len(missing)} decoder tensors "
                f"(first: decoder.{missing[0]}); is it Qwen3-TTS-Tokenizer-12Hz?"
            )
        for name, param in wanted.items():
            tensor = tensors[f"decoder.{name}"]
            if tensor.shape != param.shape:
                raise CheckpointError(
                    f"speech tokenizer tensor decoder.{name} has shape {tuple(tensor.shape)}, "
                    f"its config.json implies {tuple(param.shape)}"
                )
        self.load_state_dict({n: tensors[f"decoder.{n}"] for n in wanted}, strict=True)


# What random weights' audio spreads by before the decoder's clamp to [-1, 1] (make_audible).
RANDOM_OUTPUT_STD = 0.25


def make_audible(decoder: SpeechDecoder, seed: int) -> SpeechDecoder:
    """The decoder's convolutions redrawn so that random weights make audio that follows the
    codes (models/codecs/audible_weights.py); returns `decoder`."""
    g = torch.Generator().manual_seed(seed)
    unit_gain_convs(decoder, g)
    cfg = decoder.cfg
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, 16), generator=g)
    scale_output(
        decoder.decoder[-1].conv,
        lambda: decoder.decode(codes),
        RANDOM_OUTPUT_STD,
    )
    return decoder
