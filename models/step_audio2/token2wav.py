"""Step-Audio 2's token2wav: 25 Hz speech codes (CosyVoice 2's 6561-code S3 v2 tokenizer) →
mel (flow matching, conditioned on a speaker prompt: its codes, its mel and a CAM++ x-vector)
→ 24 kHz audio (HiFT), streamed per request and batched across requests by Voxgate's flow +
HiFT family (models/codecs/flow_hift/streaming.py, chunked == whole).

Layouts read:
- Step-Audio 2's own (`Step-Audio-2-mini/token2wav`: `flow.yaml`, `flow.pt`, `hift.pt`,
  `campplus.onnx`, `speech_tokenizer_v2_25hz.onnx`; token2wav_config.py): CosyVoice 2's flow
  with a DiT estimator (dit_estimator.py) and the voice prompt as one attention chunk, and
  CosyVoice 2's 24 kHz HiFT. The folder has no preset speaker: the voice is `prompt_wav`, or
  spk2info.pt's first speaker where the folder has one (the tiny preset's), else no speaker
  conditioning.
- CosyVoice 2's (`cosyvoice2.yaml`, `flow.pt`, `hift.pt`, optional `spk2info.pt`,
  `campplus.onnx`, `speech_tokenizer_v2.onnx`): the U-Net flow estimator.
  FunAudioLLM/CosyVoice2-0.5B works in its place (same codes, same 24 kHz).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError, check_state_dict
from models.codecs.flow_hift.checkpoint import hift_state, load_pt
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream
from models.cosyvoice2.config import CONFIG_FILE, load_config, parse_yaml_text
from models.cosyvoice2.loading import load_flow_hift_weights, ready_flow_hift
from models.cosyvoice2.voices import Voice, VoiceBank
from models.step_audio2 import token2wav_config as T2W

log = logging.getLogger("voxgate.step_audio2")

# Codes in the first audio chunk. A reply's first audio waits for its first text tokens, this
# many codes and the flow's 3 look-ahead codes, one decode step each; the chunk's audio, less
# HiFT's 8 right-context frames, (2 x 14 - 8) x 20 ms = 400 ms, plays while the next chunk's 30
# tokens are generated and decoded (~205 ms on the H200 at 5.5 ms a step and a 40-ms job).
# 20 codes (CosyVoice 2's default) waited 6 steps longer, ~33 ms, for 640 ms of first audio.
FIRST_HOP = 14
# The engine's first-audio margin for this first chunk (ModelFacts.first_audio_margin): its
# 380 ms heard (less the output encoder's 20-ms frame held back) cover 1.4 x the next chunk's
# wait up to steps of 7.7 ms (a 40-ms job). Past that the engine holds the chunk to its
# first-audio budget; with the engine's default, 3, the 20-code chunk was held past 5.5 ms.
FIRST_AUDIO_MARGIN = 1.4


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

    def first_audio_s(self, codes: int) -> float:
        return self.detok.first_audio_s(codes)

    def decode(self, streams: list[FlowHiftStream], final: list[bool]) -> list[np.ndarray]:
        return self.detok.decode(streams, final)

    def enable_cuda_graphs(self, graphs) -> None:
        self.detok.enable_cuda_graphs(graphs)


def load_token2wav(
    folder: Path, device: torch.device, dtype: torch.dtype, prompt_wav: str | None = None
) -> Token2Wav:
    """`dtype`: the flow's (HiFT is float32). `prompt_wav`: a speaker prompt clip (any rate;
    3-30 s) for the voice, in place of the folder's first spk2info.pt speaker; it needs the
    folder's two ONNX models."""
    if (folder / CONFIG_FILE).exists() or (folder / T2W.FLOW_FILE).exists():
        for name in ("flow.pt", "hift.pt"):
            if not (folder / name).exists():
                raise CheckpointError(f"token2wav folder {folder} lacks {name}")
    if (folder / CONFIG_FILE).exists():
        flow, hift, bank, chunk = _cosyvoice2_layout(folder, device, dtype)
    elif (folder / T2W.FLOW_FILE).exists():
        flow, hift, bank, chunk = _step_audio2_layout(folder, device, dtype)
    else:
        raise CheckpointError(
            f"token2wav folder {folder} has neither {T2W.FLOW_FILE} (Step-Audio-2-mini's "
            f"token2wav/) nor {CONFIG_FILE} (a CosyVoice 2 folder)"
        )
    if prompt_wav is not None:
        from models.csm.voices import load_audio

        clip = Path(prompt_wav)
        bank.add_voice("prompt", [], load_audio(clip, 16000), load_audio(clip, 24000))
        voice = bank.get("prompt")
    else:
        voice = bank.get(None)
        if not voice.flow_tokens and not voice.embedding.any():
            log.warning(
                "token2wav %s has no speaker: replies speak without a voice prompt; give a "
                "speaker clip (VOXGATE_STEP_AUDIO2_PROMPT_WAV)",
                folder,
            )
    detok = FlowHiftDetokenizer(flow, hift, chunk, first_hop=min(FIRST_HOP, chunk))
    return Token2Wav(detok, voice)


def _cosyvoice2_layout(folder: Path, device, dtype):
    cfg = load_config(folder)
    flow, hift = CausalFlow(cfg.flow), HiFTGenerator(cfg.hift)
    load_flow_hift_weights(folder, flow, hift)
    chunk, speaker_dim = cfg.chunk_size, cfg.flow.spk_embed_dim
    flow, hift, bank = ready_flow_hift(folder, chunk, speaker_dim, flow, hift, device, dtype)
    return flow, hift, bank, chunk


def _step_audio2_layout(
    folder: Path, device, dtype
) -> tuple[CausalFlow, HiFTGenerator, VoiceBank, int]:
    flow = CausalFlow(T2W.load_flow_config(folder))
    flow_sd = load_pt(folder / "flow.pt")
    check_state_dict(flow.state_dict(), flow_sd, "flow.pt's tensors")
    flow.load_state_dict(flow_sd)
    hift_sd = hift_state(load_pt(folder / "hift.pt"))
    hift = HiFTGenerator(T2W.hift_config_from_state(hift_sd))
    check_state_dict(hift.state_dict(), hift_sd, "hift.pt's tensors")
    hift.load_state_dict(hift_sd)
    chunk, speaker_dim = T2W.CHUNK_TOKENS, flow.cfg.spk_embed_dim
    flow, hift, bank = ready_flow_hift(
        folder, chunk, speaker_dim, flow, hift, device, dtype, tokenizer=T2W.SPEECH_TOKENIZER
    )
    return flow, hift, bank, chunk


def random_token2wav(device: torch.device, dtype: torch.dtype) -> Token2Wav:
    """Step-Audio-2-mini's token2wav shapes (its flow.yaml: the 16-block DiT; its HiFT) with
    seeded random weights and a random speaker, nothing downloaded: the codec cost of
    `step-audio2-mini --random-weights`. `dtype`: the flow's (HiFT is float32)."""
    cfg = T2W.parse_flow_yaml(parse_yaml_text(T2W.flow_yaml(T2W.REAL_SIZES), T2W.FLOW_FILE))
    torch.manual_seed(0)
    flow, hift = CausalFlow(cfg), HiFTGenerator(T2W.REAL_HIFT)
    hift.fold_weight_norm()
    flow = flow.to(device=device, dtype=dtype).eval()
    hift = hift.to(device=device).eval()
    voice = Voice("random", torch.randn(cfg.spk_embed_dim))
    chunk = T2W.CHUNK_TOKENS
    detok = FlowHiftDetokenizer(flow, hift, chunk, first_hop=min(FIRST_HOP, chunk))
    return Token2Wav(detok, voice)
