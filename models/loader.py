"""Find and read checkpoints in their published layout: a local folder or a Hugging Face repo id."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError, one_line

DEFAULT_PATTERNS = ("*.json", "*.safetensors", "*.bin", "*.model", "*.txt")


def resolve_source(
    source: str,
    required: tuple[str, ...] = ("config.json",),
    patterns: tuple[str, ...] = DEFAULT_PATTERNS,
) -> Path:
    """A local folder as is; otherwise a Hub repo id, downloaded (or found in the local HF
    cache); `patterns`: the repo files to fetch."""
    path = Path(source).expanduser()
    if path.is_dir():
        folder = path
    elif path.exists():
        raise CheckpointError(f"{source} is a file; point at the checkpoint's folder instead")
    elif source.count("/") == 1 and not source.startswith((".", "/", "~")):
        folder = _download(source, patterns)
    else:
        raise CheckpointError(
            f"no checkpoint folder at {source!r} (and it is not a Hugging Face repo id like owner/name)"
        )
    missing = [name for name in required if not (folder / name).exists()]
    if missing:
        raise CheckpointError(f"checkpoint folder {folder} lacks {', '.join(missing)}")
    return folder


def _download(repo_id: str, patterns: tuple[str, ...] = DEFAULT_PATTERNS) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(patterns)))
    except Exception as exc:  # offline, gated or missing repo: say which and how to fix it
        raise CheckpointError(
            f"could not fetch {repo_id!r} from the Hugging Face Hub "
            f"({type(exc).__name__}: {one_line(str(exc))}). "
            "Download it elsewhere and pass the local folder instead."
        ) from exc


def read_config(folder: Path) -> dict:
    try:
        return json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint folder {folder} lacks config.json") from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{folder / 'config.json'} is not valid JSON: {exc}") from None


def safetensors_files(folder: Path) -> list[Path]:
    """The weight files of a checkpoint: single-file or sharded with an index."""
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            raise CheckpointError(f"checkpoint folder {folder} lacks shard(s) {', '.join(missing)}")
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    if single.exists():
        return [single]
    raise CheckpointError(
        f"checkpoint folder {folder} has neither model.safetensors nor model.safetensors.index.json"
    )


def iter_safetensors(
    folder: Path, device: str | torch.device = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    for path in safetensors_files(folder):
        try:
            with safe_open(str(path), framework="pt", device=str(device)) as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                    yield name, f.get_tensor(name)
        except SafetensorError as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file: {exc}") from None


def copy_into(
    targets: dict[str, torch.Tensor], weights: Iterable[tuple[str, torch.Tensor]], where: str
) -> set[str]:
    """Copy checkpoint tensors into `targets` (checkpoint name → our tensor or slice of one)
    with a shape check; returns the names copied. A name not in `targets` raises."""
    seen: set[str] = set()
    with torch.no_grad():
        for name, tensor in weights:
            target = targets.get(name)
            if target is None:
                raise CheckpointError(f"unexpected tensor {name!r} in {where}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise CheckpointError(
                    f"tensor {name!r} in {where} has shape {tuple(tensor.shape)}, the config "
                    f"implies {tuple(target.shape)}: checkpoint and config.json do not match"
                )
            target.copy_(tensor)
            seen.add(name)
    return seen


def load_with_codec(
    folder: Path, targets: dict[str, torch.Tensor], codec_prefix: str, progress: bool
) -> tuple[set[str], list[tuple[str, torch.Tensor]]]:
    """The transformers layouts that bundle their codec (CSM, Moshi): copy the model's tensors
    into `targets` and return the names copied plus the codec's tensors (prefix stripped) for
    the codec loader."""
    codec: list[tuple[str, torch.Tensor]] = []

    def model_tensors():
        for name, tensor in iter_safetensors(folder):
            if name.startswith(codec_prefix):
                codec.append((name[len(codec_prefix) :], tensor))
            elif not name.endswith("rotary_emb.inv_freq"):
                yield name, tensor

    weights = model_tensors()
    if progress:
        from tqdm import tqdm

        weights = tqdm(weights, desc=f"loading {folder.name}", unit="tensor")
    return copy_into(targets, weights, str(folder)), codec


def raise_missing(missing: list[str], where: str) -> None:
    if missing:
        shown = ", ".join(missing[:5]) + (f" … ({len(missing)} in all)" if len(missing) > 5 else "")
        raise CheckpointError(f"checkpoint {where} is missing tensors: {shown}")
