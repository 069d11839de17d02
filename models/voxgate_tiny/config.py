"""voxgate-tiny's config.json: Llama fields for the backbone, the codec frame layout, the depth
stage size, the sampling it was tuned with, and the codec's own config under `codec_config`."""

from __future__ import annotations

from dataclasses import dataclass

from models.checkpoint_errors import CheckpointError
from models.codecs.voxcodec import VoxCodecConfig
from models.layers.llama import LlamaArgs

MODEL_TYPE = "voxgate_tiny"


@dataclass(frozen=True)
class VoxgateTinyConfig:
    llama: LlamaArgs
    num_codebooks: int  # codes per row: the codec's codebooks × frames_per_row
    codebook_size: int
    frames_per_row: int  # codec frames one backbone step emits
    text_vocab_size: int
    depth_inner: int
    reading: bool  # generated rows carry the reading position (lm.py)
    pointer_positions: int  # size of the symbol-index embedding (lm.py); 0: not embedded
    codec: VoxCodecConfig
    sampling: dict[str, float | int]
    raw: dict

    @classmethod
    def from_dict(cls, cfg: dict, where: str = "config.json") -> VoxgateTinyConfig:
        if cfg.get("model_type") != MODEL_TYPE:
            raise CheckpointError(
                f"{where} has model_type {cfg.get('model_type')!r}, not {MODEL_TYPE!r}"
            )
        try:
            codec = VoxCodecConfig.from_dict(cfg["codec_config"])
            out = cls(
                llama=LlamaArgs.from_hf_config(
                    {**cfg, "vocab_size": int(cfg["codebook_size"]) + 1}
                ),
                num_codebooks=int(cfg["num_codebooks"]),
                codebook_size=int(cfg["codebook_size"]),
                frames_per_row=int(cfg.get("frames_per_row", 1)),
                text_vocab_size=int(cfg["text_vocab_size"]),
                depth_inner=int(cfg["depth_intermediate_size"]),
                reading=bool(cfg.get("reading", False)),
                pointer_positions=int(cfg.get("pointer_positions", 0)),
                codec=codec,
                sampling={
                    k: int(v) if k == "top_k" else float(v)
                    for k, v in (cfg.get("sampling") or {}).items()
                },
                raw=cfg,
            )
        except KeyError as missing:
            raise CheckpointError(f"{where} lacks the voxgate_tiny field {missing}") from None
        per_row = codec.num_codebooks * out.frames_per_row
        if (out.num_codebooks, out.codebook_size) != (per_row, codec.codebook_size):
            raise CheckpointError(
                f"{where}: the model emits rows of {out.num_codebooks} codes of {out.codebook_size} "
                f"but {out.frames_per_row} frame(s) of the codec are {per_row} codes of "
                f"{codec.codebook_size}"
            )
        if out.pointer_positions and not out.reading:
            raise CheckpointError(f'{where}: pointer_positions needs "reading": true')
        return out


def tiny_config_dict(
    codec: VoxCodecConfig,
    text_vocab_size: int,
    hidden: int = 320,
    layers: int = 8,
    heads: int = 5,
    kv_heads: int = 1,
    intermediate: int = 768,
    depth_intermediate: int = 512,
    max_positions: int = 2048,
    frames_per_row: int = 2,
    sampling: dict[str, float] | None = None,
    reading: bool = False,
    text_input: str = "chars",
    pointer_positions: int = 0,
) -> dict:
    """The config.json of a voxgate-tiny model. Defaults: `training.speechlm --size default`,
    about 11M parameters besides the codec, of which about 9M are read per decode step: small
    enough that a laptop CPU's caches hold most of it. The shipped weights are `--size wide`
    (hidden 384, MLP 896); their CPU figures are in BENCHMARKS.md."""
    return {
        "model_type": MODEL_TYPE,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": hidden // heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": max_positions,
        "tie_word_embeddings": False,
        "num_codebooks": codec.num_codebooks * frames_per_row,
        "codebook_size": codec.codebook_size,
        "frames_per_row": frames_per_row,
        "text_vocab_size": text_vocab_size,
        "depth_intermediate_size": depth_intermediate,
        "reading": reading,
        # Text symbols the pointer can index with an embedding of its own (lm.py); 0: none.
        "pointer_positions": pointer_positions,
        # What the prompt's text ids are: "chars" (text.py) or "phones" (phone_text.py); the
        # tokenizer.json type says the same, this is for people reading the config.
        "text_input": text_input,
        # Sharper than 0.7, not greedy: held-out WER of one checkpoint was 58 % at temperature
        # 0.7 / top-k 40, 50 % at 0.4 / 20 and 54 % at 0.2 / 5 (training/README.md).
        "sampling": sampling
        or {"temperature": 0.4, "top_k": 20, "top_p": 1.0, "repetition_penalty": 1.0},
        "codec_config": codec.to_dict(),
    }
