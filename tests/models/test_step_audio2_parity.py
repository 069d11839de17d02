"""Step-Audio 2 against transformers on the same random weights (fp32, CPU): the audio stage
against a WhisperEncoder plus the reference's pool, norm and adapter math; the decoder's greedy
tokens through the engine against Qwen2ForCausalLM fed the same input embeddings (text
embeddings with the audio embeddings spliced in)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.step_audio2.loading import load_step_audio2
from models.step_audio2.presets import ensure_tiny_step_audio2
from tests.models.engine_run import run


@pytest.fixture(scope="module")
def folder():
    return ensure_tiny_step_audio2()


@pytest.fixture(scope="module")
def model(folder):
    return load_step_audio2(str(folder), torch.device("cpu"), torch.float32, "tiny-step-audio2")


def whisper_encoder(model, positions: int):
    """transformers' WhisperEncoder holding our encoder's weights, its final layer norm
    removed (Step-Audio 2 pools before its norm)."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    c = model.audio_input.cfg
    cfg = WhisperConfig(
        num_mel_bins=c.n_mels,
        d_model=c.n_state,
        encoder_layers=c.n_layer,
        encoder_attention_heads=c.n_head,
        encoder_ffn_dim=4 * c.n_state,
        max_source_positions=positions,
        activation_function="gelu",
    )
    hf = WhisperEncoder(cfg).eval()
    ours = model.audio_input.encoder
    state = {
        "conv1.weight": ours.conv1.weight,
        "conv1.bias": ours.conv1.bias,
        "conv2.weight": ours.conv2.weight,
        "conv2.bias": ours.conv2.bias,
        "embed_positions.weight": ours.positional_embedding.weight[:positions],
    }
    for i, b in enumerate(ours.blocks):
        p = f"layers.{i}."
        state |= {
            p + "self_attn.q_proj.weight": b.attn.query.weight,
            p + "self_attn.q_proj.bias": b.attn.query.bias,
            p + "self_attn.k_proj.weight": b.attn.key.weight,
            p + "self_attn.v_proj.weight": b.attn.value.weight,
            p + "self_attn.v_proj.bias": b.attn.value.bias,
            p + "self_attn.out_proj.weight": b.attn.out.weight,
            p + "self_attn.out_proj.bias": b.attn.out.bias,
            p + "self_attn_layer_norm.weight": b.attn_ln.weight,
            p + "self_attn_layer_norm.bias": b.attn_ln.bias,
            p + "fc1.weight": b.mlp[0].weight,
            p + "fc1.bias": b.mlp[0].bias,
            p + "fc2.weight": b.mlp[2].weight,
            p + "fc2.bias": b.mlp[2].bias,
            p + "final_layer_norm.weight": b.mlp_ln.weight,
            p + "final_layer_norm.bias": b.mlp_ln.bias,
        }
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) == {"layer_norm.weight", "layer_norm.bias"}
    hf.layer_norm = torch.nn.Identity()
    return hf


def test_audio_stage_equals_whisper_encoder_and_adapter_math(model):
    frames = 96  # mel frames; WhisperEncoder wants exactly 2 x max_source_positions
    mel = torch.randn(1, 128, frames)
    hf = whisper_encoder(model, frames // 2)
    enc, ad = model.audio_input.encoder, model.audio_input.adapter
    with torch.no_grad():
        blocks = hf(mel).last_hidden_state  # [1, 48, D]
        pooled = F.avg_pool1d(blocks.transpose(1, 2), 2, 2).transpose(1, 2)
        normed = F.layer_norm(pooled, pooled.shape[-1:], enc.after_norm.weight, enc.after_norm.bias)
        x = F.gelu(F.conv1d(normed.transpose(1, 2), ad.conv.weight, ad.conv.bias, 2, 1))
        want = F.linear(F.relu(F.linear(x.transpose(1, 2), ad.linear1.weight, ad.linear1.bias)),
                        ad.linear2.weight, ad.linear2.bias)  # fmt: skip
        # lengths == frames: no key masked, as WhisperEncoder masks none
        n = torch.tensor([frames])
        ours_blocks = enc.blocks_output(mel, n, n)
        feats, lengths = enc(mel, n, n)
        got = ad(feats)
    torch.testing.assert_close(ours_blocks, blocks, rtol=1e-5, atol=1e-5)
    assert int(lengths) == (frames + 1) // 4 == want.shape[1] * 2
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_batched_audio_equals_each_turn_alone(model):
    rng = np.random.default_rng(4)
    pcms = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (9000, 16000, 12345)]
    together = model.audio_input.embed_turns(pcms)
    for pcm, batched in zip(pcms, together, strict=True):
        (alone,) = model.audio_input.embed_turns([pcm])
        assert batched.shape == alone.shape
        torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)
    assert [t.shape[0] for t in together] == [7, 13, 10]  # 12.5 a second


def reference_greedy(folder, model, prompt: list[int], n: int) -> list[int]:
    """Qwen2ForCausalLM from the checkpoint's decoder tensors, fed the prompt's embeddings
    (audio slots replaced by their embeddings), greedy with the stop token masked."""
    from safetensors.torch import load_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from models.loader import read_config
    from models.step_audio2.loading import text_fields

    qwen = Qwen2ForCausalLM(Qwen2Config.from_dict(text_fields(read_config(folder)))).eval()
    tensors = load_file(str(folder / "model.safetensors"))
    qwen.load_state_dict({k: v for k, v in tensors.items() if k.startswith(("model.", "lm_head."))})
    ids = torch.tensor(prompt)
    base = model.slots.base
    x = torch.where(
        (ids >= base)[:, None],
        model.slots.table[(ids - base).clamp(min=0)],
        qwen.model.embed_tokens(ids.clamp(max=base - 1)),
    )[None]
    out, cache = [], None
    with torch.no_grad():
        for _ in range(n):
            res = qwen(inputs_embeds=x, cache=cache, use_cache=True)
            # transformers 5: the cache is passed back as `cache`
            cache = res.past_key_values
            logits = res.logits[0, -1]
            logits[list(model.ids.stop_ids)] = float("-inf")
            top = int(logits.argmax())
            out.append(top)
            x = qwen.model.embed_tokens(torch.tensor([[top]]))
    return out


def test_decoder_greedy_tokens_equal_qwen2_given_the_same_embeddings(folder, model):
    rng = np.random.default_rng(5)
    spoken = model.user_audio_turns(
        [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (12000, 20000)]
    )
    turns = [[spoken[0]], [model.user_text_turn("hello there")], [spoken[1]]]
    n = 12
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n)
    specs = [SpeechRequest("", turns=tuple(t), sampling=params) for t in turns]
    requests, _, _, peak = run(core, specs)
    assert peak == 3
    assert len({tuple(r.output_ids) for r in requests}) == 3  # each prompt steers its reply
    for req, t in zip(requests, turns, strict=True):
        prompt = model.preprocess_turns(t).token_ids
        assert list(req.prompt_ids) == prompt
        assert list(req.output_ids) == reference_greedy(folder, model, prompt, n)
