"""Build a ZonosModel from the published layouts: a Zonos folder or repo id (config.json +
model.safetensors) and a DAC folder or repo id (descript/dac_44khz)."""

from __future__ import annotations

import torch

from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.codecs.dac import DacDetokenizer, load_dac
from models.loader import resolve_source
from models.zonos.checkpoint import load_zonos_weights
from models.zonos.config import DAC_REPO
from models.zonos.model import ZonosModel
from models.zonos.phonemes import warm_up


def is_zonos_config(cfg: dict | None) -> bool:
    return bool(cfg) and "backbone" in cfg and "prefix_conditioner" in cfg


def load_zonos(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    dac_source: str | None = None,
    name: str = "zonos",
    voices_dir: str | None = None,
    speaker_source: str | None = None,
) -> ZonosModel:
    """`speaker_source`: Zonos' speaker model (voices from clips: --voices-dir's and clients');
    default a `speaker/` folder beside the weights. Without either, clients cannot clone, and
    --voices-dir clips load Zyphra/Zonos-v0.1-speaker-embedding at the first clip."""
    folder = resolve_source(source, required=("config.json", "model.safetensors"))
    dac_folder = folder / "dac" if (folder / "dac" / "config.json").exists() else None
    if dac_source is not None:
        dac_folder = resolve_source(dac_source)
    elif dac_folder is None:
        dac_folder = resolve_source(DAC_REPO)
    weights = load_zonos_weights(folder, device, dtype)
    # The codec stays float32: streamed audio then matches the whole decode to float rounding.
    dac = load_dac(dac_folder, device)
    if int(dac.config.n_codebooks) != 9:
        raise CheckpointError(f"{dac_folder} is not DAC 44.1 kHz (Zonos needs its 9 codebooks)")
    if speaker_source is None and (folder / "speaker").is_dir():
        speaker_source = str(folder / "speaker")
    speaker = None
    if speaker_source is not None and "speaker" in weights.prefix_conditioner.names:
        speaker = _load_speaker_model(speaker_source, device)
    model = ZonosModel(weights, DacDetokenizer(dac), name=name, speaker_model=speaker)
    warm_up()
    if voices_dir is not None:
        try:
            model.add_voices(_voices(model, folder, voices_dir, device))
        except ModelInputError as exc:
            raise CheckpointError(f"voices in {voices_dir}: {exc}") from None
    return model


def _load_speaker_model(source: str, device):
    from models.zonos.speaker import LDA_FILE, NETWORK_FILE, load_speaker_model

    where = resolve_source(source, (NETWORK_FILE, LDA_FILE), patterns=("*.pt",))
    return load_speaker_model(where, device)


def _voices(model: ZonosModel, folder, voices_dir: str, device):
    from models.zonos.speaker import SAMPLE_RATE, SPEAKER_REPO
    from models.zonos.voices import read_voices

    if "speaker" not in model.names:
        raise CheckpointError(f"{folder} has no speaker conditioner: it takes no voices")
    speaker = model.weights.prefix_conditioner.conditioners[model.names.index("speaker")]

    def embed(clip):  # without a speaker model yet, it loads at the first clip (.npy need none)
        if model.speaker_model is None:
            model.set_speaker_model(_load_speaker_model(SPEAKER_REPO, device))
        return model.speaker_embedding(clip)

    return read_voices(voices_dir, speaker.width, embed, SAMPLE_RATE)
