"""Voxgate's flow + HiFT modules against an independent implementation: the official Chatterbox
package's S3Gen (`chatterbox-tts`, installed by `make reference-deps`; see
official_chatterbox.py), whose flow and vocoder are CosyVoice's. Seeded random weights go into
the official module, its state dict loads into Voxgate's strictly (so the parameter names of
the published checkpoints coincide too), and both run in fp32 on the CPU.

Where the two coincide, and what is compared:
- the upsampling conformer encoder (full attention, as S3Gen runs it);
- the causal U-Net estimator with full attention (S3Gen's `static_chunk_size` is 0), and the
  non-causal two-level U-Net GLM-4-Voice's flow uses (CosyVoice 1's), on unpadded rows;
- the whole token → mel flow (CausalMaskedDiffWithXvec + CausalConditionalCFM: 10 cosine-
  scheduled Euler steps, CFG rate 0.7 with the conditional and unconditional halves in one
  batch), final decode, prompt tokens and mel, x-vector;
- HiFT: the F0 predictor, the source → waveform decode, and the whole vocoder with the
  SineGen (CosyVoice 1 style, Voxgate's `sine_gen=1`, which GLM-4-Voice's HiFT uses too)
  excitation. CosyVoice 2's SineGen2 and GLM-4-Voice's block conformer encoder have no
  counterpart in the package and are not compared here.

Where they differ (asserted below where a test can show it, and listed in docs/models.md):
- noise: S3Gen's flow draws fresh Gaussian noise per call (`randn_like`); Voxgate's is
  CosyVoice 2's fixed seed-0 noise indexed by frame, which streaming needs. The comparison
  feeds Voxgate's noise to the official solver.
- HiFT's excitation: S3Gen draws random start phases for the harmonics above the
  fundamental and fresh Gaussian noise; Voxgate starts every harmonic at phase 0 and hashes
  the noise from the absolute sample index (again for streaming). The whole-vocoder test
  feeds Voxgate's phases and noise to the official module.
- attention: CosyVoice 2 trains and streams chunk-causal attention (Voxgate's streaming
  mode); S3Gen's encoder and estimator attend over the whole utterance.
- padding: S3Gen's encoder does not zero the input embedding of padded positions (it only
  serves one row at a time); Voxgate does, so a padded batch row equals the row alone.
- non-final decodes: the package has no streaming path of its own, and its `finalize=False`
  decode fails in chatterbox-tts 0.1.7 (its mask keeps the 6 trimmed frames: a RuntimeError
  in the CFM), so only final decodes are compared. By its code, earlier frames would attend
  to the 3 held-back look-ahead tokens, which Voxgate's CosyVoice 2 path masks out of
  attention (they feed only the look-ahead convolution).
- S3Gen fades in the first 40 ms of its output (`trim_fade`) after the vocoder."""

from __future__ import annotations

import pytest
import torch
from official_chatterbox import (
    audible_hift,
    excitation_as_voxgate,
    import_official,
    noise_from,
    seeded,
)

from models.chatterbox.s3gen import TINY_S3GEN
from models.codecs.flow_hift.encoder import UpsampleConformerEncoder
from models.codecs.flow_hift.estimator import CausalConditionalDecoder
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.unet_estimator import ConditionalDecoder
from models.cosyvoice2.config import EncoderConfig, EstimatorConfig, FlowConfig, HiftConfig

# S3Gen's encoder hard-codes a width of 512 (its look-ahead and upsampling layers); the rest is
# scaled down from S3Token2Wav's settings (estimator [256] x 12 mid blocks, HiFT 512).
ENC = dict(dim=512, heads=8, hidden=64, blocks=1)
EST = dict(channels=32, head_dim=16, n_blocks=1, mid=2, heads=2)
HIFT_BASE, F0_CHANNELS = 32, 16
S3GEN_SR = 24000


@pytest.fixture(scope="module")
def official():
    hifigan, f0, decoder, cfm, flow, encoder = import_official(
        "chatterbox.models.s3gen.hifigan",
        "chatterbox.models.s3gen.f0_predictor",
        "chatterbox.models.s3gen.decoder",
        "chatterbox.models.s3gen.flow_matching",
        "chatterbox.models.s3gen.flow",
        "chatterbox.models.s3gen.transformer.upsample_encoder",
    )
    return dict(
        HiFTGenerator=hifigan.HiFTGenerator,
        ConvRNNF0Predictor=f0.ConvRNNF0Predictor,
        ConditionalDecoder=decoder.ConditionalDecoder,
        CausalConditionalCFM=cfm.CausalConditionalCFM,
        CausalMaskedDiffWithXvec=flow.CausalMaskedDiffWithXvec,
        UpsampleConformerEncoder=encoder.UpsampleConformerEncoder,
    )


def strict_copy(official: torch.nn.Module, ours: torch.nn.Module) -> torch.nn.Module:
    ours.load_state_dict(official.state_dict(), strict=True)
    return ours.eval()


# -- encoder --------------------------------------------------------------------------------


def official_encoder(official):
    return official["UpsampleConformerEncoder"](
        input_size=ENC["dim"],
        output_size=ENC["dim"],
        attention_heads=ENC["heads"],
        linear_units=ENC["hidden"],
        num_blocks=ENC["blocks"],
        input_layer="linear",
        pos_enc_layer_type="rel_pos_espnet",
        selfattention_layer_type="rel_selfattn",
        use_cnn_module=False,
        macaron_style=False,
    )


def test_encoder_matches_official_full_attention(official):
    theirs = seeded(official_encoder(official), 1)
    ours = strict_copy(
        theirs,
        UpsampleConformerEncoder(ENC["dim"], ENC["heads"], ENC["hidden"], ENC["blocks"], 4, 25, 3),
    )
    x = torch.randn(1, 37, ENC["dim"], generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([37])
    with torch.no_grad():
        expected, masks = theirs(x, lengths)
        got = ours(x, lengths, lengths, streaming=False)
    assert masks.shape == (1, 1, 74)
    assert got.shape == expected.shape == (1, 74, ENC["dim"])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_encoder_streaming_attention_departs_from_official(official):
    """Voxgate's chunk-causal mode (CosyVoice 2's streaming) is not what S3Gen runs: with a
    chunk shorter than the utterance, early frames no longer see later tokens."""
    theirs = seeded(official_encoder(official), 1)
    ours = strict_copy(
        theirs,
        UpsampleConformerEncoder(ENC["dim"], ENC["heads"], ENC["hidden"], ENC["blocks"], 4, 10, 3),
    )
    x = torch.randn(1, 37, ENC["dim"], generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([37])
    with torch.no_grad():
        expected, _ = theirs(x, lengths)
        got = ours(x, lengths, lengths, streaming=True)
    # Ten times the tolerance the full-attention comparison above holds to, and more.
    assert (got - expected).abs().max() > 1e-3


# -- estimator ------------------------------------------------------------------------------


def official_estimator(official):
    """The official causal estimator at the test's sizes (EST)."""
    return official["ConditionalDecoder"](
        in_channels=320,
        out_channels=80,
        causal=True,
        channels=[EST["channels"]],
        attention_head_dim=EST["head_dim"],
        n_blocks=EST["n_blocks"],
        num_mid_blocks=EST["mid"],
        num_heads=EST["heads"],
        act_fn="gelu",
    )


def estimator_pair(official, seed: int):
    theirs = official_estimator(official)
    seeded(theirs, seed)
    ours = CausalConditionalDecoder(
        320, 80, (EST["channels"],), EST["head_dim"], EST["n_blocks"], EST["mid"], EST["heads"], 50
    )
    return theirs, strict_copy(theirs, ours)


def estimator_inputs(b: int, t: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x, mu, cond = (torch.randn(b, 80, t, generator=g) for _ in range(3))
    return x, mu, torch.rand(b, generator=g), torch.randn(b, 80, generator=g), cond


def test_estimator_matches_official(official):
    theirs, ours = estimator_pair(official, 3)
    x, mu, t, spks, cond = estimator_inputs(2, 40, 4)
    # The second row is padded after frame 27: masked frames are zero in both outputs, and
    # the valid ones do not attend to them.
    mask = (torch.arange(40)[None, :] < torch.tensor([[40], [27]]))[:, None].float()
    with torch.no_grad():
        expected = theirs(x, mask, mu, t, spks, cond)
        got = ours(x, mask, mu, t, spks, cond, streaming=False)
    assert expected[1, :, 27:].abs().max() == 0
    assert expected.abs().mean() > 1e-2  # the comparison is not of near-zero outputs
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_non_causal_unet_estimator_matches_official(official):
    """GLM-4-Voice's estimator (CosyVoice 1's non-causal U-Net, two levels) against the
    package's `ConditionalDecoder(causal=False)`. CosyVoice 1 hands attention a 0/1 mask that
    is *added* to the scores (unet_estimator.py reproduces it, as the weights were trained so);
    S3Gen's masks with a large negative bias. On unpadded rows the two agree (a constant added
    to every score changes nothing), which is what is compared; padded rows differ by design."""
    theirs = official["ConditionalDecoder"](
        in_channels=320,
        out_channels=80,
        causal=False,
        channels=[EST["channels"], EST["channels"]],
        attention_head_dim=EST["head_dim"],
        n_blocks=EST["n_blocks"],
        num_mid_blocks=EST["mid"],
        num_heads=EST["heads"],
        act_fn="gelu",
    )
    seeded(theirs, 12)
    ours = strict_copy(
        theirs,
        ConditionalDecoder(
            320,
            80,
            (EST["channels"], EST["channels"]),
            EST["head_dim"],
            EST["n_blocks"],
            EST["mid"],
            EST["heads"],
        ),
    )
    x, mu, t, spks, cond = estimator_inputs(2, 40, 13)
    mask = torch.ones(2, 1, 40)
    with torch.no_grad():
        expected = theirs(x, mask, mu, t, spks, cond)
        got = ours(x, mask, mu, t, spks, cond)
    assert expected.abs().mean() > 1e-2
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


# -- the whole flow -------------------------------------------------------------------------


def flow_config(vocab: int = 6561) -> FlowConfig:
    return FlowConfig(
        input_size=ENC["dim"],
        output_size=80,
        spk_embed_dim=192,
        vocab_size=vocab,
        token_mel_ratio=2,
        pre_lookahead_len=3,
        encoder=EncoderConfig(ENC["dim"], ENC["heads"], ENC["hidden"], ENC["blocks"], 25),
        estimator=EstimatorConfig(
            320,
            80,
            (EST["channels"],),
            EST["head_dim"],
            EST["n_blocks"],
            EST["mid"],
            EST["heads"],
            50,
        ),
        inference_cfg_rate=0.7,
        t_scheduler="cosine",
    )


def official_flow(official, seed: int):
    estimator = official_estimator(official)
    cfm = official["CausalConditionalCFM"](spk_emb_dim=80, estimator=estimator)
    flow = official["CausalMaskedDiffWithXvec"](encoder=official_encoder(official), decoder=cfm)
    return seeded(flow, seed)


def flow_inputs(prompt_tokens: int, generated: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, 6561, (1, prompt_tokens), generator=g)
    tokens = torch.randint(0, 6561, (1, generated), generator=g)
    prompt_mel = torch.randn(1, 2 * prompt_tokens, 80, generator=g)
    xvector = torch.randn(1, 192, generator=g)
    return prompt, tokens, prompt_mel, xvector


def test_flow_mel_matches_official_final_decode(official):
    theirs = official_flow(official, 5)
    ours = strict_copy(theirs, CausalFlow(flow_config()))
    prompt, tokens, prompt_mel, xvector = flow_inputs(12, 30, 6)
    with torch.no_grad(), noise_from(ours.noise):
        expected, _ = theirs.inference(
            token=tokens,
            token_len=torch.tensor([30]),
            prompt_token=prompt,
            prompt_token_len=torch.tensor([12]),
            prompt_feat=prompt_mel,
            prompt_feat_len=None,
            embedding=xvector,
            finalize=True,
            n_timesteps=10,
        )
    every = torch.cat([prompt, tokens], dim=1)
    n = torch.tensor([42])
    mel = ours(every, n, n, prompt_mel, torch.tensor([24]), xvector, streaming=False)
    assert expected.shape == (1, 80, 60)
    assert expected.abs().mean() > 1e-2
    torch.testing.assert_close(mel[:, :, 24:], expected, atol=1e-4, rtol=1e-4)


# -- HiFT -----------------------------------------------------------------------------------


def hift_config() -> HiftConfig:
    """S3Token2Wav's HiFTGenerator as Voxgate's Chatterbox configures it (models/chatterbox/
    s3gen.py), scaled down: the official module below is built from the package's own
    arguments, so a wrong configuration here fails the comparison."""
    assert (TINY_S3GEN.hift_channels, TINY_S3GEN.f0_channels) == (HIFT_BASE, F0_CHANNELS)
    return TINY_S3GEN.hift_config()


@pytest.fixture(scope="module")
def hift_pair(official):
    theirs = official["HiFTGenerator"](
        in_channels=80,
        base_channels=HIFT_BASE,
        sampling_rate=S3GEN_SR,
        upsample_rates=[8, 5, 3],
        upsample_kernel_sizes=[16, 11, 7],
        source_resblock_kernel_sizes=[7, 7, 11],
        source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        f0_predictor=official["ConvRNNF0Predictor"](cond_channels=F0_CHANNELS),
    )
    seeded(theirs, 7, scale=0.1)
    # A predictor whose f0 varies by frame (0-300 Hz for the test mels), so the excitation's
    # voiced (sine) branch runs, and its noise-only branch where f0 falls under 10 Hz.
    seeded(theirs.f0_predictor, 11, scale=1.0)
    with torch.no_grad():
        theirs.f0_predictor.classifier.weight.mul_(100.0)
        theirs.f0_predictor.classifier.bias.mul_(100.0)
    ours = HiFTGenerator(hift_config())
    audible_hift(theirs, ours)
    return theirs, ours.eval()


def mel(frames: int, seed: int) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def test_hift_f0_and_decode_match_official(hift_pair):
    theirs, ours = hift_pair
    x = mel(30, 8)
    source = torch.randn(1, 1, 30 * 480, generator=torch.Generator().manual_seed(9)) * 0.1
    with torch.no_grad():
        f0_expected = theirs.f0_predictor(x)
        expected = theirs.decode(x, source)
        f0 = ours.f0_predictor(x)
        got = ours.decode(x, source)
    torch.testing.assert_close(f0, f0_expected, atol=1e-4, rtol=1e-5)
    assert got.shape == expected.shape == (1, 30 * 480)
    assert expected.abs().mean() > 1e-3 and (expected.abs() < 0.99).float().mean() > 0.9
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    # The comparison sees the mel's path, not only the excitation's: another mel, other audio.
    with torch.no_grad():
        other = theirs.decode(mel(30, 99), source)
    assert (other - expected).abs().mean() > 0.1 * expected.abs().mean()


def test_hift_vocoder_matches_official_with_the_same_excitation(hift_pair):
    theirs, ours = hift_pair
    x = mel(30, 10)
    with torch.no_grad(), excitation_as_voxgate(9):
        expected, _ = theirs.inference(speech_feat=x)
    audio, f0 = ours(x, torch.zeros(1, 9, dtype=torch.float64), torch.zeros(1, dtype=torch.long))
    voiced = (f0 > 10).float().mean()
    assert 0.2 < voiced < 1.0, "both the voiced and the unvoiced branch should run"
    assert audio.shape == expected.shape
    # The official sine phase is a float32 running sum over the samples, Voxgate's a float64
    # one: over a clip this short (0.6 s) they agree to within 1e-4 of the signal's RMS
    # (measured 5e-5; it grows with the clip, test_chatterbox_s3gen.py).
    rms = float(expected.pow(2).mean().sqrt())
    torch.testing.assert_close(audio, expected, atol=1e-4 * rms, rtol=0)
