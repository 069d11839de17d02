"""S3Gen (`s3gen.safetensors`): CosyVoice's causal flow matching (speech tokens → 80-bin mel
at 50 Hz) and HiFT (mel → 24 kHz) from models/codecs/flow_hift/, as Chatterbox runs them.

Where Chatterbox differs from CosyVoice 2 (tests/models/test_flow_hift_reference.py compares
the modules with the official package):
- the flow's encoder and estimator attend over the whole utterance (no attention chunks);
- HiFT's excitation is SineGen (CosyVoice 1 style, `sine_gen=1`), not SineGen2;
- the first 40 ms of the output are faded in (`trim_fade`: 20 ms of silence, then a
  raised-cosine ramp) against spill-over from the reference clip;
- the checkpoint also holds the S3 speech tokenizer (`tokenizer.*`) and the CAM++ x-vector
  extractor (`speaker_encoder.*`), which make voices from clips; a preset voice (conds.pt)
  needs neither.
The flow's noise is Voxgate's fixed, frame-indexed noise (the package draws it afresh)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from models.chatterbox.config import S3GEN_FILE, SAMPLE_RATE, SPEECH_CODES
from models.checkpoint_errors import CheckpointError, check_state_dict
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.cosyvoice2.config import (
    EncoderConfig,
    EstimatorConfig,
    FlowConfig,
    HiftConfig,
    hift_24k,
)

# Voice-from-clip parts of the checkpoint, loaded by neither network here.
CLIP_ENCODERS = ("tokenizer.", "speaker_encoder.")
ESTIMATOR_HEAD_DIM = 64  # S3Token2Mel's attention_head_dim
TRIM_SAMPLES = SAMPLE_RATE // 50  # 20 ms


@dataclass(frozen=True)
class S3GenSizes:
    encoder_dim: int
    encoder_heads: int
    encoder_ff: int
    encoder_blocks: int
    estimator_channels: int
    estimator_heads: int
    estimator_blocks: int  # transformer blocks per level
    estimator_mid: int
    hift_channels: int
    f0_channels: int

    def flow_config(self) -> FlowConfig:
        return FlowConfig(
            input_size=self.encoder_dim,
            output_size=80,
            spk_embed_dim=192,
            vocab_size=SPEECH_CODES,
            token_mel_ratio=2,
            pre_lookahead_len=3,
            # static_chunk_size 0 in both: S3Gen attends over its whole input, never in chunks.
            encoder=EncoderConfig(
                self.encoder_dim, self.encoder_heads, self.encoder_ff, self.encoder_blocks, 0
            ),
            estimator=EstimatorConfig(
                320,
                80,
                (self.estimator_channels,),
                ESTIMATOR_HEAD_DIM,
                self.estimator_blocks,
                self.estimator_mid,
                self.estimator_heads,
                0,
            ),
            inference_cfg_rate=0.7,
            t_scheduler="cosine",
        )

    def hift_config(self) -> HiftConfig:
        """S3Token2Wav's HiFTGenerator (hifigan.py's defaults for what it does not set)."""
        return hift_24k(self.hift_channels, self.f0_channels, sine_gen=1)


# S3Token2Wav: encoder 512 x 6 (+4 up) blocks, estimator [256] x 12 mid, HiFT 512.
REAL_S3GEN = S3GenSizes(512, 8, 2048, 6, 256, 8, 4, 12, 512, 512)
TINY_S3GEN = S3GenSizes(32, 2, 64, 1, 32, 2, 1, 1, 32, 16)


def _count(state: dict, prefix: str) -> int:
    n = 0
    while any(k.startswith(f"{prefix}{n}.") for k in state):
        n += 1
    return n


def s3gen_sizes(state: dict[str, torch.Tensor]) -> S3GenSizes:
    """S3Gen's sizes read off s3gen.safetensors' tensors (the package hard-codes them)."""
    try:
        enc = "flow.encoder.encoders.0."
        est = "flow.decoder.estimator."
        return S3GenSizes(
            encoder_dim=state["flow.encoder.embed.out.0.weight"].shape[0],
            encoder_heads=state[enc + "self_attn.pos_bias_u"].shape[0],
            encoder_ff=state[enc + "feed_forward.w_1.weight"].shape[0],
            encoder_blocks=_count(state, "flow.encoder.encoders."),
            estimator_channels=state[est + "down_blocks.0.0.block1.block.0.weight"].shape[0],
            estimator_heads=state[est + "down_blocks.0.1.0.attn1.to_q.weight"].shape[0]
            // ESTIMATOR_HEAD_DIM,
            estimator_blocks=_count(state, est + "down_blocks.0.1."),
            estimator_mid=_count(state, est + "mid_blocks."),
            hift_channels=state["mel2wav.conv_pre.parametrizations.weight.original1"].shape[0],
            f0_channels=state[
                "mel2wav.f0_predictor.condnet.0.parametrizations.weight.original1"
            ].shape[0],
        )
    except KeyError as missing:
        raise CheckpointError(f"{S3GEN_FILE} lacks the tensor {missing}") from None


@dataclass(frozen=True)
class S3GenVoice:
    """What S3Gen takes from a reference clip (conds.pt's `gen`): its speech tokens, its 24 kHz
    mel (2 frames a token) and its CAM++ x-vector."""

    prompt_tokens: torch.Tensor  # [P] int64
    prompt_mel: torch.Tensor  # [2P, 80]
    xvector: torch.Tensor  # [192]

    @classmethod
    def from_conds(cls, gen: dict) -> S3GenVoice:
        try:
            tokens = gen["prompt_token"].reshape(-1).long()
            mel = gen["prompt_feat"].reshape(-1, 80).float()
            xvector = gen["embedding"].reshape(-1).float()
        except (KeyError, RuntimeError) as exc:
            raise CheckpointError(f"conds.pt's `gen` is not a Chatterbox voice: {exc}") from None
        # S3Token2Mel.embed_ref keeps 2 mel frames per token; the flow relies on it.
        if mel.shape[0] != 2 * tokens.shape[0]:
            raise CheckpointError(
                f"conds.pt's voice has {tokens.shape[0]} prompt tokens but {mel.shape[0]} mel "
                "frames (2 per token expected)"
            )
        return cls(tokens, mel, xvector)


def trim_fade(n: int = TRIM_SAMPLES) -> np.ndarray:
    """S3Token2Wav's fade-in: n samples of silence, then a raised cosine over n samples."""
    fade = np.zeros(2 * n, dtype=np.float32)
    fade[n:] = ((torch.cos(torch.linspace(torch.pi, 0, n)) + 1) / 2).numpy()
    return fade


class S3Gen(nn.Module):
    def __init__(self, sizes: S3GenSizes) -> None:
        super().__init__()
        self.sizes = sizes
        self.flow = CausalFlow(sizes.flow_config())
        self.mel2wav = HiFTGenerator(sizes.hift_config())

    @torch.inference_mode()
    def mel(self, tokens: list[int], voice: S3GenVoice) -> torch.Tensor:
        """A whole utterance's generated mel [80, 2N] float32 (S3Token2Mel.forward,
        finalize=True), the flow in its own dtype."""
        weight = self.flow.encoder_proj.weight
        device, dtype = weight.device, weight.dtype
        codes = torch.tensor([t for t in tokens if 0 <= t < SPEECH_CODES], dtype=torch.long)
        if codes.numel() == 0:
            raise ValueError("no speech tokens to decode")
        every = torch.cat([voice.prompt_tokens, codes]).to(device)[None]
        n = torch.tensor([every.shape[1]], device=device)
        p = voice.prompt_tokens.shape[0]
        mel = self.flow(
            every,
            n,
            n,
            voice.prompt_mel.to(device, dtype)[None],
            torch.tensor([2 * p], device=device),
            voice.xvector.to(device, dtype)[None],
            streaming=False,
        )
        return mel[0, :, 2 * p :]

    def decode(self, tokens: list[int], voice: S3GenVoice) -> np.ndarray:
        """A whole utterance's audio at 24 kHz (S3Token2Wav.inference)."""
        return self.vocode(self.mel(tokens, voice))

    @torch.inference_mode()
    def vocode(self, mel: torch.Tensor) -> np.ndarray:
        """A whole utterance's mel [80, T] → its audio at 24 kHz, faded in as S3Gen's is."""
        mel = mel[None]
        zero = torch.zeros(1, dtype=torch.long, device=mel.device)
        phase0 = torch.zeros(1, self.sizes.hift_config().nb_harmonics + 1, dtype=torch.float64)
        audio, _ = self.mel2wav(mel, phase0.to(mel.device), zero)
        out = audio[0].float().cpu().numpy().copy()
        fade = trim_fade()[: out.shape[0]]
        out[: fade.shape[0]] *= fade
        return out


def load_s3gen(state: dict[str, torch.Tensor]) -> S3Gen:
    """S3Gen from s3gen.safetensors' state dict; CheckpointError naming anything missing,
    unexpected or mis-shaped among the flow's and HiFT's tensors."""
    model = S3Gen(s3gen_sizes(state))
    nets = {k: t for k, t in state.items() if not k.startswith(CLIP_ENCODERS)}
    check_state_dict(model.state_dict(), nets, f"{S3GEN_FILE}'s flow and HiFT tensors")
    model.load_state_dict(nets)
    model.mel2wav.fold_weight_norm()
    return model.eval()
