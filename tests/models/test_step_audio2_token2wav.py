"""Step-Audio 2's own token2wav (models/step_audio2/token2wav*.py, the DiT flow estimator in
models/codecs/flow_hift/dit_estimator.py), fp32 on the CPU at tiny sizes:

- the published layout: the tiny preset's token2wav folder (flow.yaml, flow.pt, hift.pt)
  loads through the real loader with the published parameter names; the real flow.yaml's
  shapes; clear errors for a wrong folder;
- Voxgate's streaming flow (one pass over the row, chunk-causal masks, the voice prompt as one
  chunk) against StepFun's streaming as an independent construction on the same weights
  (step_audio2_streaming_reference.py: caches, chunk by chunk): the DiT's forward and the
  flow's mel for a code sequence;
- against StepFun's own modules (official_step_audio2.py; skipped where `make
  reference-deps` could not fetch them): the DiT's and the encoder's whole-utterance forward.
Streamed == whole for this token2wav is in test_step_audio2_turns.py (the tiny preset)."""

from __future__ import annotations

import torch
from step_audio2_streaming_reference import dit_chunk, stream_flow

from models.codecs.flow_hift.dit_estimator import DitConfig, DitEstimator
from models.codecs.flow_hift.encoder import chunk_ids
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import parse_yaml_text
from models.step_audio2 import token2wav_config as T2W

CPU = torch.device("cpu")
TINY_DIT = DitConfig(
    in_channels=320,
    out_channels=80,
    hidden_size=32,
    depth=2,
    num_heads=2,
    head_dim=16,
    mlp_ratio=4.0,
    static_chunk_size=50,
)


def seeded(module: torch.nn.Module, seed: int, scale: float = 0.2) -> torch.nn.Module:
    """Every parameter random (adaLN's zero init would hide most of the network)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return module.eval()


def tiny_flow(seed: int) -> CausalFlow:
    cfg = T2W.parse_flow_yaml(parse_yaml_text(T2W.flow_yaml(T2W.TINY_SIZES), "flow.yaml"))
    return seeded(CausalFlow(cfg), seed)


def test_real_flow_yaml_shapes_and_the_tiny_preset_layout():
    cfg = T2W.parse_flow_yaml(parse_yaml_text(T2W.flow_yaml(T2W.REAL_SIZES), "flow.yaml"))
    est = cfg.estimator
    assert isinstance(est, DitConfig) and cfg.prompt_chunk
    assert (est.depth, est.hidden_size, est.num_heads, est.head_dim) == (16, 512, 8, 64)
    assert (est.in_channels, est.out_channels, est.static_chunk_size) == (320, 80, 50)
    enc = cfg.encoder
    assert (enc.output_size, enc.num_blocks, enc.num_up_blocks, enc.attention_heads) == (
        512,
        6,
        4,
        8,
    )
    assert (cfg.vocab_size, cfg.spk_embed_dim, cfg.pre_lookahead_len) == (6561, 192, 3)
    assert T2W.REAL_HIFT.sampling_rate == 24000 and T2W.REAL_HIFT.samples_per_frame == 480

    from models.codecs.flow_hift.checkpoint import load_pt
    from models.step_audio2.presets import ensure_tiny_step_audio2
    from models.step_audio2.token2wav import load_token2wav

    folder = ensure_tiny_step_audio2() / "token2wav"
    flow_sd, hift_sd = load_pt(folder / "flow.pt"), load_pt(folder / "hift.pt")
    for name in (  # decoder_dit.DiT's parameter names, as flow.pt holds them
        "decoder.estimator.t_embedder.mlp.0.weight",
        "decoder.estimator.in_proj.weight",
        "decoder.estimator.blocks.1.attn.q_norm.weight",
        "decoder.estimator.blocks.1.attn.to_k.bias",
        "decoder.estimator.blocks.1.conv.block.6.weight",
        "decoder.estimator.blocks.1.adaLN_modulation.1.weight",
        "decoder.estimator.final_layer.adaLN_modulation.1.bias",
        "encoder.up_encoders.0.self_attn.pos_bias_u",
    ):
        assert name in flow_sd, name
    assert all(k.startswith("generator.") for k in hift_sd)
    t2w = load_token2wav(folder, CPU, torch.float32)
    assert isinstance(t2w.detok.flow.decoder.estimator, DitEstimator)
    assert (t2w.sample_rate, t2w.chunk, t2w.lookahead) == (24000, 25, 3)


def test_chunk_grid_with_the_prompt_as_one_chunk():
    # 4 prompt codes, then a short first chunk of 2 (grid of 3): ids -1 -1 -1 -1 | 0 0 | 1 1 1 | 2
    ids = chunk_ids(
        10, 3, CPU, first_end=torch.tensor([6]), short_by=1, prompt_end=torch.tensor([4])
    )
    assert ids.tolist() == [[-1, -1, -1, -1, 0, 0, 1, 1, 1, 2]]


def test_dit_streaming_forward_equals_chunk_by_chunk_caches():
    est = seeded(DitEstimator(TINY_DIT), 3)
    gen = torch.Generator().manual_seed(4)
    prompt, frames = 30, 30 + 50 + 50 + 20
    x, mu, cond = (torch.randn(1, 80, frames, generator=gen) for _ in range(3))
    spks, t = torch.randn(1, 80, generator=gen), torch.tensor([0.3])
    grid = chunk_ids(frames, 50, CPU, prompt_end=torch.tensor([prompt]))
    with torch.no_grad():
        whole = est(x, torch.ones(1, 1, frames), mu, t, spks, cond, True, grid)
        caches = [{} for _ in est.blocks]
        bounds = [(0, prompt), (30, 80), (80, 130), (130, frames)]
        parts = [
            dit_chunk(est, x[..., s:e], mu[..., s:e], t, spks, cond[..., s:e], caches)
            for s, e in bounds
        ]
        torch.testing.assert_close(whole, torch.cat(parts, dim=2), rtol=1e-4, atol=1e-4)
        # Not the whole-utterance attention: later frames would change earlier ones.
        full = est(x, torch.ones(1, 1, frames), mu, t, spks, cond, False)
        assert not torch.allclose(full[..., :80], whole[..., :80], atol=1e-3)


def test_flow_mel_equals_the_official_streaming_with_caches():
    flow = tiny_flow(5)
    gen = torch.Generator().manual_seed(6)
    prompt = torch.randint(0, 6561, (20,), generator=gen).tolist()
    codes = torch.randint(0, 6561, (60,), generator=gen).tolist()  # chunks 25, 25 and 10
    prompt_mel = torch.randn(2 * len(prompt), 80, generator=gen)
    speaker = torch.randn(192, generator=gen)
    hift = HiFTGenerator(T2W.hift_config(*T2W.TINY_HIFT)).eval()
    # Unbounded history and a whole first chunk: the official streaming's own chunks.
    detok = FlowHiftDetokenizer(flow, hift, 25, context_chunks=None, first_hop=25)
    stream = detok.new_stream(prompt, prompt_mel, speaker)
    detok.push(stream, codes)
    detok._flow_step([stream], [True])  # the mel alone (HiFT is not the subject)
    with torch.no_grad():
        ref = stream_flow(flow, prompt, prompt_mel, speaker, codes)
    assert stream.mel.shape == ref.shape == (80, 2 * len(codes))
    torch.testing.assert_close(stream.mel, ref, rtol=1e-3, atol=1e-3)


def test_dit_and_encoder_whole_forward_equal_stepfuns_modules():
    from official_step_audio2 import import_official

    (dit_mod,) = import_official("cosyvoice2.flow.decoder_dit")
    official = dit_mod.DiT(
        in_channels=320, out_channels=80, mlp_ratio=4.0, depth=2, num_heads=2, head_dim=16,
        hidden_size=32,
    )  # fmt: skip
    seeded(official, 7)
    ours = DitEstimator(TINY_DIT).eval()
    ours.load_state_dict(official.state_dict(), strict=True)
    gen = torch.Generator().manual_seed(8)
    b, frames = 2, 64
    x, mu, cond = (torch.randn(b, 80, frames, generator=gen) for _ in range(3))
    spks, t = torch.randn(b, 80, generator=gen), torch.tensor([0.1, 0.7])
    mask = torch.ones(b, 1, frames)
    mask[1, :, 40:] = 0  # a shorter row: its valid frames as if alone
    with torch.no_grad():
        want = official(x, mask, mu, t, spks, cond)
        got = ours(x, mask, mu, t, spks, cond, False)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1, :, :40], want[1, :, :40], rtol=1e-4, atol=1e-4)

    (enc_mod,) = import_official("cosyvoice2.transformer.upsample_encoder_v2")
    official_enc = enc_mod.UpsampleConformerEncoderV2(
        input_size=32, output_size=32, pre_lookahead_len=3, num_blocks=1, num_up_blocks=1,
        attention_heads=2, linear_units=64,
    )  # fmt: skip
    seeded(official_enc, 9, scale=0.1)
    flow = tiny_flow(0)
    flow.encoder.load_state_dict(official_enc.state_dict(), strict=True)
    xs = torch.randn(1, 30, 32, generator=gen)
    lengths = torch.tensor([30])
    with torch.no_grad():
        want, _ = official_enc(xs, lengths)
        got = flow.encoder(xs, lengths, lengths, False)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_rows_with_different_prompts_batched_equal_each_alone():
    """Rows of one flow call carry their own prompt chunk (lengths 20 and 33 codes, neither a
    whole chunk) and padding; each row's mel is the one it gets alone."""
    flow = tiny_flow(10)
    hift = HiFTGenerator(T2W.hift_config(*T2W.TINY_HIFT)).eval()
    gen = torch.Generator().manual_seed(11)

    def new(detok, n_prompt: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, 6561, (n_prompt,), generator=g).tolist()
        return detok.new_stream(
            prompt, torch.randn(2 * n_prompt, 80, generator=g), torch.randn(192, generator=g)
        )

    codes = [torch.randint(0, 6561, (n,), generator=gen).tolist() for n in (70, 41)]
    detok = FlowHiftDetokenizer(flow, hift, 25, first_hop=20)
    together = [new(detok, 20, 1), new(detok, 33, 2)]
    for s, c in zip(together, codes, strict=True):
        detok.push(s, c)
    detok._flow_step(together, [True, True])
    for i, (n_prompt, c) in enumerate(zip((20, 33), codes, strict=True)):
        alone = new(detok, n_prompt, i + 1)
        detok.push(alone, c)
        detok._flow_step([alone], [True])
        torch.testing.assert_close(together[i].mel, alone.mel, rtol=1e-4, atol=1e-4)
