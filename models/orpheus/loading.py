"""Build an OrpheusModel from checkpoint folders (published layout) or from a config alone."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.snac import SnacDetokenizer, load_snac
from models.layers.llama import LlamaArgs, LlamaForCausalLM
from models.loader import iter_safetensors, read_config, resolve_source, safetensors_files
from models.orpheus import tokens as T
from models.orpheus.configs import is_orpheus_config
from models.orpheus.model import OrpheusModel
from models.random_weights import randomise


def _load_tokenizer(folder: Path):
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(f"checkpoint folder {folder} lacks tokenizer.json")
    return Tokenizer.from_file(str(path))


def _count_tensors(folder: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in safetensors_files(folder):
        with safe_open(str(path), framework="pt") as f:
            total += len(list(f.keys()))
    return total


def load_orpheus(
    source: str,
    codec: str,
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = False,
    name: str | None = None,
    constrain_audio_tokens: bool = True,
) -> OrpheusModel:
    folder = resolve_source(source, required=("config.json", "tokenizer.json"))
    cfg = read_config(folder)
    if not is_orpheus_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not an Orpheus checkpoint (needs model_type 'llama' and a "
            f"vocabulary of at least {T.AUDIO_END} tokens, got {cfg.get('model_type')!r} / "
            f"{cfg.get('vocab_size')})"
        )
    llm = _build_llm(cfg, device, dtype)
    weights = iter_safetensors(folder)
    if progress:
        from tqdm import tqdm

        weights = tqdm(
            weights, total=_count_tensors(folder), desc=f"loading {folder.name}", unit="tensor"
        )
    llm.load_hf_weights(weights)
    tokenizer = _load_tokenizer(folder)
    detok = SnacDetokenizer(load_snac(codec, device=device))
    return OrpheusModel(llm.eval(), tokenizer, detok, name or folder.name, constrain_audio_tokens)


def _build_llm(cfg: dict, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    args = LlamaArgs.from_hf_config(cfg)
    with torch.device(device):
        llm = LlamaForCausalLM(args)
    return llm.to(dtype)


def random_orpheus(
    cfg: dict,
    codec_model,
    tokenizer,
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
    name: str,
) -> OrpheusModel:
    """Real shapes, seeded random weights, nothing read from disk: for benchmarks of the real
    configuration where the weights cannot be downloaded."""
    torch.manual_seed(seed)
    llm = _build_llm(cfg, device, dtype)
    randomise(llm)
    return OrpheusModel(llm.eval(), tokenizer, SnacDetokenizer(codec_model), name)
