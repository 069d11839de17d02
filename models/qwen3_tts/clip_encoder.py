"""The 12 Hz speech tokenizer's encoder (`encoder.*` in speech_tokenizer/model.safetensors): a
Mimi (transformers' MimiModel, its encoder half) whose first 16 codebooks are the talker's
codes. The Base models' in-context voice cloning puts a clip's codes in the prompt."""

from __future__ import annotations

import math

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.mimi import build_mimi

# transformers 4 (the published checkpoint, under `encoder.`) named Mimi's encoder modules
# flat; transformers 5 nests them (models/codecs/mimi.py maps the whole model the same way).
_FLAT_TO_NESTED = (
    ("encoder.layers.", "encoder.encoder_seanet.layers."),
    ("encoder_transformer.", "encoder.encoder_transformer."),
    ("downsample.", "encoder.downsample."),
)


def _swap(name: str, pairs) -> str:
    for old, new in pairs:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def _nested(published: str) -> str:
    """`encoder.<flat Mimi name>` as published → our MimiModel's name."""
    return _swap(published.removeprefix("encoder."), _FLAT_TO_NESTED)


def _published(nested: str) -> str | None:
    """Our MimiModel's name → the published one; None for the decoder half (not published)."""
    if nested.startswith("decoder."):
        return None
    return "encoder." + _swap(nested, [(new, old) for old, new in _FLAT_TO_NESTED])


def require_transformers() -> None:
    """Qwen3-TTS's Mimi encoder and mel filters come from transformers; say how to get it."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise CheckpointError(
            "Qwen3-TTS needs the `transformers` package (>= 5.21): pip install 'voxgate[qwen3-tts]'"
        ) from None


class ClipEncoder:
    def __init__(self, config: dict, num_codebooks: int, samples_per_frame: int) -> None:
        require_transformers()
        self.mimi = build_mimi(config)
        self.num_codebooks = num_codebooks
        self.samples_per_frame = samples_per_frame

    def load(self, tensors: dict[str, torch.Tensor], where: str) -> None:
        state = {_nested(k): v for k, v in tensors.items() if k.startswith("encoder.")}
        expected = {k for k in self.mimi.state_dict() if _published(k) is not None}
        missing = sorted(expected - set(state))
        if missing:
            raise CheckpointError(
                f"{where} lacks {len(missing)} speech-tokenizer encoder tensors (first: "
                f"{_published(missing[0])}); voice cloning needs the encoder"
            )
        result = self.mimi.load_state_dict(state, strict=False)
        if result.unexpected_keys:
            raise CheckpointError(
                f"{where}: unexpected encoder tensors {result.unexpected_keys[:3]}"
            )

    def published_state(self) -> dict[str, torch.Tensor]:
        """The encoder's tensors under their published names (the checkpoint writer's)."""
        out = {}
        for name, tensor in self.mimi.state_dict().items():
            published = _published(name)
            if published is not None:
                out[published] = tensor.contiguous()
        return out

    def to(self, device: torch.device) -> ClipEncoder:
        self.mimi = self.mimi.to(device)
        return self

    @torch.inference_mode()
    def encode(self, audio: np.ndarray) -> np.ndarray:
        """float32 mono at 24 kHz → codes [frames, num_codebooks], one frame per started
        1920 samples (the package's Qwen3TTSTokenizerV2Model.encode)."""
        device = next(self.mimi.parameters()).device
        wave = torch.as_tensor(np.asarray(audio, dtype=np.float32), device=device)
        codes = self.mimi.encode(wave[None, None]).audio_codes[0, : self.num_codebooks]
        frames = math.ceil(len(audio) / self.samples_per_frame)
        return codes[:, :frames].T.cpu().numpy()
