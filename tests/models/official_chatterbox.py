"""The official Chatterbox package (`chatterbox-tts` on PyPI) as an independent reference.

`make reference-deps` installs it with `--no-deps` into the git-ignored `.ref/` folder (or
the folder named by VOXGATE_REFERENCE_DIR), with only what its S3Gen modules import beyond
the project's own environment: the project's pinned torch, numpy and transformers are never
replaced. The folder goes at the *end* of sys.path, so the project's packages win.

The package's `__init__` files import everything (the TTS front end, torchaudio, librosa,
the watermarker), none of which the decoder modules need; so the packages are registered
here as bare namespaces and only the named submodules run."""

from __future__ import annotations

import importlib
import sys
import types
from contextlib import contextmanager
from unittest import mock

import pytest
import torch

from models.codecs.flow_hift.audible_weights import make_audible
from models.codecs.flow_hift.hift import HiFTGenerator, positional_gaussian
from tests.models.reference_dirs import reference_dir

PACKAGES = ("chatterbox", "chatterbox.models", "chatterbox.models.s3gen")


def import_official(*modules: str) -> list[types.ModuleType]:
    """The named `chatterbox.…` modules, imported from the reference folder; skips the test
    with the install command when the reference is missing."""
    root = reference_dir()
    if not (root / "chatterbox" / "models" / "s3gen").is_dir():
        pytest.skip(
            f"the official chatterbox-tts reference is not installed in {root}: "
            "run `make reference-deps`"
        )
    if str(root) not in sys.path:
        sys.path.append(str(root))
    for name in PACKAGES:
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root / name.replace(".", "/"))]
            sys.modules[name] = package
    # An incomplete install fails loudly (ImportError names the module to add to
    # `make reference-deps`), rather than skipping the comparison unnoticed.
    return [importlib.import_module(m) for m in modules]


def seeded(module: torch.nn.Module, seed: int, scale: float = 0.05) -> torch.nn.Module:
    """Every parameter redrawn from a seeded generator (no zero biases, no unit norms left
    from the module's own init), in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return module.eval()


def audible_hift(theirs: torch.nn.Module, ours: HiFTGenerator) -> None:
    """The official HiFT's weights made audible (models/codecs/flow_hift/audible_weights.py),
    through `ours`, a HiFTGenerator of the same config: with its weight norms at one small
    random scale the mel's path fades ~1e4-fold and a comparison would see only the sine
    excitation's. Both modules end with the same weights."""
    ours.load_state_dict(theirs.state_dict(), strict=True)
    make_audible(ours)
    theirs.load_state_dict(ours.state_dict(), strict=True)


@contextmanager
def noise_from(source: torch.Tensor):
    """The official CFM's `torch.randn_like(mu)` draws Voxgate's fixed noise instead."""

    def draw(like, *args, **kwargs):
        return source[:, :, : like.shape[-1]].expand(like.shape[0], -1, -1).to(like.dtype).clone()

    with mock.patch.object(torch, "randn_like", draw):
        yield


@contextmanager
def excitation_as_voxgate(harmonics: int):
    """The official SineGen's random draws made Voxgate's: every harmonic starts at phase 0,
    and its Gaussian noise is Voxgate's position-hashed noise (from sample 0)."""
    from torch.distributions.uniform import Uniform

    real_randn_like = torch.randn_like

    def noise(like, *args, **kwargs):
        if like.dim() == 3 and like.shape[1] == harmonics:  # SineGen's [B, H, N] noise
            start = torch.zeros(like.shape[0], dtype=torch.long)
            return positional_gaussian(start, like.shape[2], harmonics).transpose(1, 2)
        return real_randn_like(like, *args, **kwargs)  # the unused noise-branch output

    def zero_phase(self, sample_shape=()):
        return torch.zeros(sample_shape)

    with (
        mock.patch.object(torch, "randn_like", noise),
        mock.patch.object(Uniform, "sample", zero_phase),
    ):
        yield


def import_with_stand_ins(module: str, absent: tuple[str, ...]) -> types.ModuleType:
    """An official module whose file imports, at its top, packages the comparison never calls
    and the reference install leaves out (librosa, onnx, torchaudio): bare modules stand in
    for those during the import only. `module` is `chatterbox.…` or `s3tokenizer.…` (the
    latter's package registered bare too: its __init__ imports tqdm and the CLI)."""
    root = reference_dir()
    if module.startswith("s3tokenizer") and not (root / "s3tokenizer").is_dir():
        pytest.skip(
            f"the s3tokenizer reference is not installed in {root}: run `make reference-deps`"
        )
    stand_ins = {}
    for name in absent:
        try:
            importlib.import_module(name)
        except ImportError:
            stand_ins[name] = types.ModuleType(name)
    if module.startswith("s3tokenizer") and "s3tokenizer" not in sys.modules:
        if str(root) not in sys.path:
            sys.path.append(str(root))
        package = types.ModuleType("s3tokenizer")
        package.__path__ = [str(root / "s3tokenizer")]
        sys.modules["s3tokenizer"] = package
    with mock.patch.dict(sys.modules, stand_ins):
        if module.startswith("chatterbox"):
            (loaded,) = import_official(module)
        else:
            loaded = importlib.import_module(module)
    return loaded
