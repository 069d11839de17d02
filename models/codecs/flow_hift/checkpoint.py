"""Reading the flow + HiFT family's published `.pt` files (CosyVoice 1/2, GLM-4-Voice's decoder)."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError


def load_pt(path: Path) -> dict[str, torch.Tensor]:
    """A published state dict (`flow.pt`, `hift.pt`, `llm.pt`), tensors only."""
    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"could not read {path}: {exc}") from exc


def hift_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """hift.pt as HiFTGenerator names it: no `generator.` prefix (HiFiGan training wrapper),
    torch's parametrized weight norm (`weight_g`/`weight_v` in older saves)."""
    out = {}
    for name, tensor in state.items():
        name = name.removeprefix("generator.")
        if name.endswith(".weight_g"):
            name = name[: -len("weight_g")] + "parametrizations.weight.original0"
        elif name.endswith(".weight_v"):
            name = name[: -len("weight_v")] + "parametrizations.weight.original1"
        out[name] = tensor
    return out
