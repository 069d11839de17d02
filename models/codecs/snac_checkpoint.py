"""SNAC checkpoints in the published layout (hubertsiuzdak/snac_24khz): config.json holding the
`snac.SNAC` constructor arguments plus pytorch_model.bin, loaded from a folder or a Hugging Face
repo id, with errors that name the file or tensor at fault."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from snac import SNAC
from snac.layers import NoiseBlock
from torch import nn

from models.checkpoint_errors import CheckpointError, check_state_dict, one_line
from models.codecs.snac_noise import PositionalNoise, install_positional_noise

DEFAULT_REPO = "hubertsiuzdak/snac_24khz"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "pytorch_model.bin"


def snac_24khz_config() -> dict:
    """Constructor arguments of the published hubertsiuzdak/snac_24khz config.json."""
    return {
        "sampling_rate": 24000,
        "encoder_dim": 48,
        "encoder_rates": [2, 4, 8, 8],
        "decoder_dim": 1024,
        "decoder_rates": [8, 8, 4, 2],
        "attn_window_size": None,
        "codebook_size": 4096,
        "codebook_dim": 8,
        "vq_strides": [4, 2, 1],
        "noise": True,
        "depthwise": True,
    }


def tiny_snac_config() -> dict:
    """snac_24khz scaled down in width only: same rates, strides, kernels and codebooks, so the
    same hop (512), frame (7 codes → 2048 samples) and receptive field; fast enough for tests."""
    return {**snac_24khz_config(), "encoder_dim": 16, "decoder_dim": 64}


def load_snac(
    source: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> SNAC:
    """Load SNAC from a folder in the published layout (config.json + pytorch_model.bin) or a
    Hugging Face repo id such as `hubertsiuzdak/snac_24khz`. Raises CheckpointError naming the
    file or tensor at fault. The decoder's noise is made positional (see PositionalNoise)."""
    folder = _resolve(source)
    config_path = folder / CONFIG_FILE
    config = _read_config(config_path)
    try:
        model = SNAC(**config)
    except TypeError as e:
        raise CheckpointError(
            f"{config_path} does not hold SNAC constructor arguments ({e}); "
            f"compare it with the config.json of {DEFAULT_REPO}"
        ) from e
    weights_path = folder / WEIGHTS_FILE
    state = _modern_weight_norm_names(_read_weights(weights_path))
    _check_tensors(model, state, weights_path)
    model.load_state_dict(state, strict=True)
    install_positional_noise(model)
    return model.to(device=device, dtype=dtype).eval()


def save_snac(model: SNAC, folder: str | Path) -> Path:
    """Write `model` in the published layout, which `load_snac` reads back."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(snac_config(model), indent=2) + "\n")
    state = {name: t.detach().to("cpu") for name, t in model.state_dict().items()}
    torch.save(state, folder / WEIGHTS_FILE)
    return folder


def snac_config(model: SNAC) -> dict:
    """The constructor arguments of `model`. SNAC keeps most as attributes; `noise` and
    `depthwise` are read off the decoder's structure. latent_dim is written only when it is not
    the derived default, as in the published configs."""
    config = {
        "sampling_rate": int(model.sampling_rate),
        "encoder_dim": int(model.encoder_dim),
        "encoder_rates": [int(r) for r in model.encoder_rates],
        "decoder_dim": int(model.decoder_dim),
        "decoder_rates": [int(r) for r in model.decoder_rates],
        "attn_window_size": model.attn_window_size,
        "codebook_size": int(model.codebook_size),
        "codebook_dim": int(model.codebook_dim),
        "vq_strides": [int(s) for s in model.vq_strides],
        "noise": any(isinstance(m, NoiseBlock | PositionalNoise) for m in model.decoder.modules()),
        "depthwise": model.decoder.model[0].groups > 1,
    }
    if model.latent_dim != model.encoder_dim * 2 ** len(model.encoder_rates):
        config["latent_dim"] = int(model.latent_dim)
    return config


def _resolve(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(
            f"{source} is a file; pass the folder holding {CONFIG_FILE} and {WEIGHTS_FILE}"
        )
    if source.startswith((".", "/", "~")):
        raise CheckpointError(
            f"SNAC checkpoint folder {source} does not exist; pass a folder with {CONFIG_FILE} "
            f"and {WEIGHTS_FILE} (the layout of {DEFAULT_REPO}) or a Hugging Face repo id"
        )
    try:
        return Path(snapshot_download(source, allow_patterns=[CONFIG_FILE, WEIGHTS_FILE]))
    except (OSError, ValueError) as e:  # hub HTTP/offline errors are OSError, bad ids ValueError
        raise CheckpointError(
            f"could not fetch {source!r} from the Hugging Face Hub ({one_line(str(e))}). "
            f"Without network, download it where there is (`hf download {source} --local-dir "
            "DIR`) and pass DIR"
        ) from e


def _read_config(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing; a SNAC checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE} "
            f"(the layout of {DEFAULT_REPO})"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); re-download it") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} must hold a JSON object of SNAC constructor arguments")
    return config


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing; a SNAC checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE} "
            f"(the layout of {DEFAULT_REPO})"
        )
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise CheckpointError(
            f"{path} is not a readable torch state dict ({e}); re-download it"
        ) from e
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path} must hold a flat state dict of tensors")
    return state


def _modern_weight_norm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The published snac_24khz pytorch_model.bin (269 tensors) already uses the parametrization
    names `<conv>.parametrizations.weight.original0/1` of torch.nn.utils.parametrizations
    .weight_norm, which the snac package builds. Checkpoints saved with the older
    torch.nn.utils.weight_norm name the same tensors `<conv>.weight_g/weight_v` (same shapes:
    magnitude, direction); rename those so both load."""
    renamed = {}
    for name, tensor in state.items():
        for old, new in (("weight_g", "original0"), ("weight_v", "original1")):
            if name.endswith("." + old):
                name = f"{name[: -len(old)]}parametrizations.weight.{new}"
        renamed[name] = tensor
    return renamed


def _check_tensors(model: SNAC, state: dict[str, torch.Tensor], path: Path) -> None:
    check_state_dict(model.state_dict(), state, f"the tensors of {path}")


def fold_weight_norm(model: nn.Module) -> None:
    """Bake every weight-norm parametrisation into a plain weight. Decoding then reads one
    tensor per conv instead of recomputing g·v/|v| (hundreds of small kernels) on every call;
    the outputs are the same up to float rounding. Do this after loading: the folded module's
    state-dict names are no longer the published ones."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
