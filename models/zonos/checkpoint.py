"""Zonos weights in the published layout: config.json + model.safetensors, tensor names as the
official `Zonos` module's state dict (`backbone.…`, `prefix_conditioner.…`, `embeddings.{k}`,
`heads.{k}`); the backbone is the transformer's or, with ssm_cfg in config.json, the hybrid's. The DAC codec is a separate checkpoint (descript/dac_44khz, transformers'
DacModel layout)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from models.checkpoint_errors import CheckpointError
from models.loader import iter_safetensors
from models.zonos.backbone import ZonosBackbone
from models.zonos.conditioning import PrefixConditioner
from models.zonos.config import EMBED_ROWS, HEAD_ROWS, N_CODEBOOKS, ZonosConfig
from models.zonos.hybrid import HybridBackbone

WEIGHTS_FILE = "model.safetensors"


class ZonosWeights(nn.Module):
    def __init__(self, config: ZonosConfig) -> None:
        super().__init__()
        self.config = config
        d = config.backbone.d_model
        hybrid = config.backbone.ssm is not None
        self.backbone = (
            HybridBackbone(config.backbone) if hybrid else ZonosBackbone(config.backbone)
        )
        self.prefix_conditioner = PrefixConditioner(d, config.conditioners)
        self.embeddings = nn.ModuleList(nn.Embedding(EMBED_ROWS, d) for _ in range(N_CODEBOOKS))
        self.heads = nn.ModuleList(nn.Linear(d, HEAD_ROWS, bias=False) for _ in range(N_CODEBOOKS))


def load_zonos_weights(folder: Path, device: torch.device, dtype: torch.dtype) -> ZonosWeights:
    try:
        config = ZonosConfig.from_dict(json.loads((folder / "config.json").read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{folder}/config.json: {exc}") from None
    if not (folder / WEIGHTS_FILE).exists():
        raise CheckpointError(f"Zonos checkpoint {folder} lacks {WEIGHTS_FILE}")
    weights = ZonosWeights(config)
    state = weights.state_dict()
    seen = set()
    for name, tensor in iter_safetensors(folder):
        if name not in state:
            raise CheckpointError(f"unexpected tensor {name!r} in {folder}/{WEIGHTS_FILE}")
        if name.startswith("heads.") and tensor.shape[0] > HEAD_ROWS:
            tensor = tensor[:HEAD_ROWS]  # a head saved after the reference padded it to 1026
        if tuple(tensor.shape) != tuple(state[name].shape):
            raise CheckpointError(
                f"tensor {name!r} has shape {tuple(tensor.shape)}; config.json implies "
                f"{tuple(state[name].shape)}"
            )
        state[name].copy_(tensor)
        seen.add(name)
    missing = sorted(set(state) - seen)
    if missing:
        raise CheckpointError(f"{folder}/{WEIGHTS_FILE} lacks {', '.join(missing[:5])}")
    # Everything in `dtype`, the Fourier bases too, as the reference casts the whole model.
    weights.to(device, dtype)
    return weights.eval()


def write_zonos_checkpoint(folder: Path, config: ZonosConfig, seed: int) -> None:
    """Seeded random weights in the published layout. The norms get random affine terms and
    the unconditional vectors random values, so that every published tensor matters."""
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    weights = ZonosWeights(config)
    with torch.no_grad():
        for name, p in weights.named_parameters():
            if name.endswith("uncond_vector"):
                p.normal_()
            elif "norm" in name:  # LayerNorm affine terms around their identity values
                p.normal_(mean=1.0 if name.endswith("weight") else 0.0, std=0.1)
            elif name.endswith(".D"):  # Mamba2's skip term, around its initial 1
                p.normal_(mean=1.0, std=0.1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    state = {k: v.contiguous() for k, v in weights.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE))
