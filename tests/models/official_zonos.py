"""The official Zonos code (github.com/Zyphra/Zonos; the `zonos` name on PyPI is an empty
placeholder) as an independent reference for the parity tests.

`make reference-deps` copies its `zonos/` source folder, fetched from GitHub at a pinned commit,
into the git-ignored `.ref/` folder (or VOXGATE_REFERENCE_DIR): a pip install of that commit
would leave out `zonos.backbone`. Offline, the tests that need it skip.
Its modules import, at the top, packages that only paths these tests never take use:
torchaudio (reference-clip resampling and the speaker model), inflect (spelling out digits),
kanjize and sudachipy (Japanese). Where those are not installed they are registered here as
empty stand-ins, so the transformer backbone, the prefix conditioner (phonemes through the
real phonemizer and eSpeak NG), the delay pattern and the sampler all run as published."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from tests.models.reference_dirs import reference_dir

_STAND_INS = ("torchaudio", "inflect", "kanjize", "sudachipy")


def _stand_in(name: str) -> None:
    if name in sys.modules or importlib.util.find_spec(name) is not None:
        return
    module = types.ModuleType(name)
    module.engine = lambda: None  # inflect
    module.number2kanji = str  # kanjize

    class _Dictionary:  # sudachipy: the Japanese normaliser's default argument builds one
        def __init__(self, *args, **kwargs) -> None:
            pass

        def create(self) -> None:
            return None

    module.Dictionary, module.SplitMode = _Dictionary, types.SimpleNamespace(A="A")
    sys.modules[name] = module


def import_official():
    """(zonos.model, zonos.conditioning, zonos.backbone._torch); skips the test with the
    install command when the reference is missing."""
    root = reference_dir()
    if not (root / "zonos" / "backbone" / "_torch.py").is_file():
        pytest.skip(f"the official Zonos code is not in {root}: run `make reference-deps`")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    for name in _STAND_INS:
        _stand_in(name)
    model = importlib.import_module("zonos.model")
    return (
        model,
        importlib.import_module("zonos.conditioning"),
        importlib.import_module("zonos.backbone._torch"),
    )


def official_model(folder: Path, dac_folder: Path):
    """The official `Zonos` module with the checkpoint at `folder` in float32 on the CPU (its
    own from_local casts to bfloat16), its DAC loaded from `dac_folder` instead of the Hub."""
    import json

    from safetensors.torch import load_file
    from transformers import DacModel

    zmodel, _, backbone = import_official()

    class LocalDac(zmodel.DACAutoencoder):
        def __init__(self) -> None:
            self.dac = DacModel.from_pretrained(str(dac_folder)).eval().requires_grad_(False)
            self.codebook_size = self.dac.config.codebook_size
            self.num_codebooks = self.dac.quantizer.n_codebooks
            self.sampling_rate = self.dac.config.sampling_rate

    config = zmodel.ZonosConfig.from_dict(json.loads((folder / "config.json").read_text()))
    original = zmodel.DACAutoencoder
    zmodel.DACAutoencoder = LocalDac
    try:
        model = zmodel.Zonos(config, backbone.TorchZonosBackbone).float().eval()
    finally:
        zmodel.DACAutoencoder = original
    state = model.state_dict()
    state.update(load_file(str(folder / "model.safetensors")))
    model.load_state_dict(state)  # as from_local: its hook pads the heads afterwards
    # generate() asks setup_cache for its default bfloat16 cache; float32 here.
    setup = model.setup_cache
    model.setup_cache = lambda batch_size, max_seqlen, dtype=None: setup(
        batch_size, max_seqlen, torch.float32
    )
    return model


@torch.inference_mode()
def official_greedy_grid(
    model, text: str, frames: int, **cond
) -> tuple[torch.Tensor, torch.Tensor]:
    """The official generate(), greedy (temperature 0, its repetition penalty on), CFG 2:
    (the delayed code grid's frames 1..frames [9, frames], the audio codes it returns)."""
    zmodel, conditioning, _ = import_official()
    cond_dict = conditioning.make_cond_dict(text=text, device="cpu", **cond)
    prefix = model.prepare_conditioning(cond_dict)
    grid: list[torch.Tensor] = []
    delay = zmodel.apply_delay_pattern

    def keep_grid(codes: torch.Tensor, mask: int) -> torch.Tensor:
        grid.append(delay(codes, mask))  # generate() fills this tensor in place
        return grid[-1]

    zmodel.apply_delay_pattern = keep_grid
    try:
        codes = model.generate(
            prefix,
            max_new_tokens=frames,
            cfg_scale=2.0,
            sampling_params={"temperature": 0.0},
            progress_bar=False,
            disable_torch_compile=True,
        )
    finally:
        zmodel.apply_delay_pattern = delay
    return grid[0][0, :, 1 : frames + 1], codes[0]
