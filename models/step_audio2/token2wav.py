"""Step-Audio 2's token2wav: 25 Hz speech codes (CosyVoice 2's 6561-code S3 v2 tokenizer) →
mel (flow matching, conditioned on a speaker prompt: its codes, its mel and a CAM++ x-vector)
→ 24 kHz audio (HiFT), streamed per request and batched across requests by Voxgate's flow +
HiFT family (models/codecs/flow_hift/streaming.py, chunked == whole).

Layouts read:
- CosyVoice 2's (`cosyvoice2.yaml`, `flow.pt`, `hift.pt`, optional `spk2info.pt`,
  `campplus.onnx`, `speech_tokenizer_v2.onnx`): the U-Net flow estimator Voxgate has. The
  tiny preset writes this layout; FunAudioLLM/CosyVoice2-0.5B itself works too (same codes,
  same 24 kHz).
- Step-Audio 2's own (`Step-Audio-2-mini/token2wav`: `flow.yaml`, `flow.pt`, `hift.pt`,
  `campplus.onnx`, `speech_tokenizer_v2_25hz.onnx`): its flow is CosyVoice 2's with a
  different encoder (UpsampleConformerEncoderV2) and a DiT estimator in place of the U-Net.
  Voxgate does not implement those yet; loading it raises a CheckpointError that says what
  to use instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream
from models.cosyvoice2.config import CONFIG_FILE, load_config
from models.cosyvoice2.loading import load_flow_hift_weights, ready_flow_hift
from models.cosyvoice2.voices import (
    Voice,
)

FIRST_HOP = 20  # codes in the first audio chunk (as CosyVoice 2's DEFAULT_FIRST_HOP)
STEP_AUDIO_FLOW = "flow.yaml"


class Token2Wav:
    """One voice's token2wav: the decoder protocol StepAudio2Model drives (new_stream, push,
    decode)."""

    def __init__(self, detok: FlowHiftDetokenizer, voice: Voice) -> None:
        self.detok, self.voice = detok, voice
        self.sample_rate = detok.sample_rate
        self.chunk, self.first_hop, self.lookahead = detok.chunk, detok.first_hop, detok.lookahead

    def new_stream(self) -> FlowHiftStream:
        v = self.voice
        return self.detok.new_stream(v.flow_tokens, v.mel, v.embedding)

    def push(self, stream: FlowHiftStream, codes: list[int]) -> None:
        self.detok.push(stream, codes)

    def decode(self, streams: list[FlowHiftStream], final: list[bool]) -> list[np.ndarray]:
        return self.detok.decode(streams, final)

    def enable_cuda_graphs(self, graphs) -> None:
        self.detok.enable_cuda_graphs(graphs)


def load_token2wav(
    folder: Path, device: torch.device, dtype: torch.dtype, prompt_wav: str | None = None
) -> Token2Wav:
    """`prompt_wav`: a speaker prompt clip (any rate; 3-30 s) for the voice, in place of the
    folder's first spk2info.pt speaker; it needs the folder's two ONNX models."""
    if not (folder / CONFIG_FILE).exists():
        if (folder / STEP_AUDIO_FLOW).exists():
            raise CheckpointError(
                f"{folder} is Step-Audio 2's own token2wav (flow.yaml: a DiT flow estimator), "
                "which Voxgate does not implement yet. Point VOXGATE_STEP_AUDIO2_TOKEN2WAV at a "
                "CosyVoice 2 folder (FunAudioLLM/CosyVoice2-0.5B decodes the same 25 Hz codes "
                "at 24 kHz), or serve transcript-only with VOXGATE_STEP_AUDIO2_TOKEN2WAV=none"
            )
        raise CheckpointError(f"token2wav folder {folder} lacks {CONFIG_FILE}")
    for name in ("flow.pt", "hift.pt"):
        if not (folder / name).exists():
            raise CheckpointError(f"token2wav folder {folder} lacks {name}")
    cfg = load_config(folder)
    flow, hift = CausalFlow(cfg.flow), HiFTGenerator(cfg.hift)
    load_flow_hift_weights(folder, flow, hift)
    flow, hift, bank = ready_flow_hift(folder, cfg, flow, hift, device, dtype)
    if prompt_wav is not None:
        from models.csm.voices import load_audio

        clip = Path(prompt_wav)
        bank.add_voice("prompt", [], load_audio(clip, 16000), load_audio(clip, 24000))
        voice = bank.get("prompt")
    else:
        voice = bank.get(None)
    detok = FlowHiftDetokenizer(
        flow, hift, cfg.chunk_size, first_hop=min(FIRST_HOP, cfg.chunk_size)
    )
    return Token2Wav(detok, voice)


def random_token2wav(device: torch.device, dtype: torch.dtype) -> Token2Wav:
    """CosyVoice 2's real flow + HiFT shapes with seeded random weights and a random speaker,
    nothing downloaded: the codec cost of `step-audio2-mini --random-weights`."""
    from models.cosyvoice2.presets import ensure_real_config

    cfg = load_config(ensure_real_config())
    torch.manual_seed(0)
    flow, hift = CausalFlow(cfg.flow), HiFTGenerator(cfg.hift)
    hift.fold_weight_norm()
    flow = flow.to(device=device, dtype=dtype).eval()
    hift = hift.to(device=device).eval()
    voice = Voice("random", torch.randn(cfg.flow.spk_embed_dim))
    detok = FlowHiftDetokenizer(
        flow, hift, cfg.chunk_size, first_hop=min(FIRST_HOP, cfg.chunk_size)
    )
    return Token2Wav(detok, voice)
