"""The official S3Gen's flow and HiFT built at test sizes with seeded random weights, and its
whole-utterance decode (S3Token2Wav.inference's three steps on the official modules; its class
itself needs torchaudio and the S3 tokenizer package, which the reference install leaves out):
shared by the S3Gen parity and streaming tests."""

from __future__ import annotations

from pathlib import Path

import torch
from official_chatterbox import (
    audible_hift,
    excitation_as_voxgate,
    import_official,
    noise_from,
    seeded,
)
from safetensors.torch import load_file, save_file

from models.chatterbox.s3gen import S3Gen, S3GenSizes, S3GenVoice, load_s3gen
from models.codecs.flow_hift.hift import HiFTGenerator

# The official encoder is 512 wide (hard-coded); the rest is scaled down.
SIZES = S3GenSizes(512, 8, 64, 1, 32, 2, 1, 1, 32, 16)


def official_s3gen_parts(seed: int):
    hifigan, f0, decoder, cfm, flow, encoder = import_official(
        "chatterbox.models.s3gen.hifigan",
        "chatterbox.models.s3gen.f0_predictor",
        "chatterbox.models.s3gen.decoder",
        "chatterbox.models.s3gen.flow_matching",
        "chatterbox.models.s3gen.flow",
        "chatterbox.models.s3gen.transformer.upsample_encoder",
    )
    enc = encoder.UpsampleConformerEncoder(
        output_size=512, attention_heads=8, linear_units=64, num_blocks=1, input_size=512
    )
    est = decoder.ConditionalDecoder(
        in_channels=320,
        out_channels=80,
        causal=True,
        channels=[32],
        attention_head_dim=64,
        n_blocks=1,
        num_mid_blocks=1,
        num_heads=2,
        act_fn="gelu",
    )
    the_flow = flow.CausalMaskedDiffWithXvec(
        encoder=enc, decoder=cfm.CausalConditionalCFM(spk_emb_dim=80, estimator=est)
    )
    hift = hifigan.HiFTGenerator(
        in_channels=80,
        base_channels=32,
        sampling_rate=24000,
        upsample_rates=[8, 5, 3],
        upsample_kernel_sizes=[16, 11, 7],
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        f0_predictor=f0.ConvRNNF0Predictor(cond_channels=16),
    )
    seeded(the_flow, seed)
    seeded(hift, seed + 1, scale=0.1)
    seeded(hift.f0_predictor, seed + 2, scale=1.0)
    with torch.no_grad():  # f0 of tens to hundreds of Hz: the voiced branch runs
        hift.f0_predictor.classifier.weight.mul_(100.0)
        hift.f0_predictor.classifier.bias.mul_(100.0)
    audible_hift(hift, HiFTGenerator(SIZES.hift_config()))
    return the_flow, hift


def voice(seed: int, prompt_tokens: int = 10) -> S3GenVoice:
    g = torch.Generator().manual_seed(seed)
    return S3GenVoice(
        torch.randint(0, 6561, (prompt_tokens,), generator=g),
        torch.randn(2 * prompt_tokens, 80, generator=g),
        torch.randn(192, generator=g),
    )


def official_decode(flow, hift, tokens: list[int], v: S3GenVoice, noise: torch.Tensor):
    """S3Token2Wav.inference on the official modules."""
    with torch.no_grad(), noise_from(noise):
        mel, _ = flow.inference(
            token=torch.tensor([tokens]),
            token_len=torch.tensor([len(tokens)]),
            prompt_token=v.prompt_tokens[None],
            prompt_token_len=torch.tensor([v.prompt_tokens.shape[0]]),
            prompt_feat=v.prompt_mel[None],
            prompt_feat_len=None,
            embedding=v.xvector[None],
            finalize=True,
            n_timesteps=10,
        )
    with torch.no_grad(), excitation_as_voxgate(9):
        wav, _ = hift.inference(speech_feat=mel)
    wav = wav.clone()  # an inference-mode tensor
    # S3Token2Wav's trim_fade, as its __init__ builds it.
    n_trim = 24000 // 50
    fade = torch.zeros(2 * n_trim)
    fade[n_trim:] = (torch.cos(torch.linspace(torch.pi, 0, n_trim)) + 1) / 2
    wav[:, : len(fade)] *= fade
    return mel[0], wav[0].numpy()


def official_and_ours(seed: int, folder: Path) -> tuple[tuple, S3Gen, dict[str, torch.Tensor]]:
    """The official flow and HiFT with seeded random weights, saved as s3gen.safetensors in
    `folder` (with the voice-from-clip tensors the published file also holds) and loaded
    through Voxgate's loader → ((flow, hift), Voxgate's S3Gen, the saved state)."""
    flow, hift = official_s3gen_parts(seed)
    state = {f"flow.{k}": v for k, v in flow.state_dict().items()}
    state |= {f"mel2wav.{k}": v for k, v in hift.state_dict().items()}
    # The published file's voice-from-clip networks, which the loader leaves alone.
    state["tokenizer._mel_filters"] = torch.zeros(128, 201)
    state["speaker_encoder.head.conv1.weight"] = torch.zeros(32, 1, 3, 3)
    path = folder / "s3gen.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return (flow, hift), load_s3gen(load_file(str(path))), state
