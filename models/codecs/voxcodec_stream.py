"""VoxCodec as the engine's batched, streaming detokenizer, and its checkpoint layout.

Layout: a folder with `config.json` (VoxCodecConfig, model_type "voxcodec") and
`model.safetensors` (the module's state dict); inside a voxgate-tiny checkpoint the same tensors
carry the prefix `codec.` and the config sits under `codec_config`.

The decoder is causal with no look-ahead, so, as for Mimi, each call decodes exactly the frames
pushed since the last one, and the carried state makes the result equal to one whole decode.
Measured on CPU float32, max |chunked - whole| / RMS(whole) over irregular 1–12 frame chunks:
about 2e-6 (random weights): float summation order only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError, check_state_dict
from models.codecs.stream_batching import decode_by_length, split_states, stack_states
from models.codecs.voxcodec import VoxCodec, VoxCodecConfig
from models.device_util import download, upload


def build_codec(config: dict, tensors: Iterable[tuple[str, torch.Tensor]], where: str) -> VoxCodec:
    """A VoxCodec from its config dict and (name, tensor) pairs, names without prefix."""
    codec = VoxCodec(VoxCodecConfig.from_dict(config))
    expected = codec.state_dict()
    state = {name: t.to(expected[name].dtype) if name in expected else t for name, t in tensors}
    check_state_dict(expected, state, f"the codec tensors of {where}")
    codec.load_state_dict(state, strict=True)
    return codec.eval()


def load_voxcodec(folder: str | Path, device: torch.device | str = "cpu") -> VoxCodec:
    """A standalone codec folder (config.json + model.safetensors)."""
    from models.loader import iter_safetensors, read_config, resolve_source

    path = resolve_source(str(folder), required=("config.json", "model.safetensors"))
    return build_codec(read_config(path), iter_safetensors(path), str(path)).to(device)


def save_voxcodec(codec: VoxCodec, folder: Path, dtype: torch.dtype = torch.float32) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(codec.config.to_dict(), indent=2) + "\n")
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in codec.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


@dataclass
class VoxCodecStream:
    """One request's decoder state: frames waiting to be decoded and the carried layer state
    (tensors without the batch dimension; None until the first decode)."""

    pending: list[list[int]] = field(default_factory=list)
    state: list[torch.Tensor] | None = None


class VoxCodecDetokenizer:
    """Per-request code streams → audio chunks; streams with the same number of pending frames
    share one decoder call."""

    def __init__(self, codec: VoxCodec) -> None:
        self.codec = codec.eval()
        c = codec.config
        self.num_codebooks = c.num_codebooks
        self.codebook_size = c.codebook_size
        self.sample_rate = c.sample_rate
        self.frame_rate = c.frame_rate
        self.samples_per_frame = c.hop_length
        param = next(codec.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._fresh: list[torch.Tensor] | None = None

    def new_stream(self) -> VoxCodecStream:
        return VoxCodecStream()

    def push(self, stream: VoxCodecStream, frames: list[list[int]]) -> None:
        for frame in frames:
            if (
                len(frame) != self.num_codebooks
                or min(frame) < 0
                or max(frame) >= self.codebook_size
            ):
                raise ValueError(
                    f"a VoxCodec frame is {self.num_codebooks} codes in [0, {self.codebook_size}), "
                    f"got {frame}"
                )
        stream.pending.extend(frames)

    @torch.inference_mode()
    def decode(self, streams: list[VoxCodecStream]) -> list[np.ndarray]:
        """Decode every stream's pending frames (float32 mono, possibly empty)."""
        return decode_by_length(streams, self._decode_group)

    def _decode_group(self, group: list[VoxCodecStream]) -> list[np.ndarray]:
        codes = upload([s.pending for s in group], torch.long, self.device)  # [B, n, K]
        fresh = self._fresh_state()
        state = stack_states(group, fresh)
        audio, state = self.codec.decode(codes, state)
        audio = download(audio.float().clamp(-1.0, 1.0))
        split_states(group, state)
        for s in group:
            s.pending = []
        return list(audio)

    def _fresh_state(self) -> list[torch.Tensor]:
        if self._fresh is None:
            self._fresh = [t[0] for t in self.codec.initial_state(1, self.device, self.dtype)]
        return self._fresh


def require_codec_config(cfg: dict, where: str) -> dict:
    codec = cfg.get("codec_config")
    if not isinstance(codec, dict):
        raise CheckpointError(f"{where}/config.json lacks codec_config (the VoxCodec settings)")
    return codec
