"""GLM-4-Voice's backbone (published ChatGLM names, loaded by the real loader) through the engine
equals transformers' GLM implementation on the same weights, greedy, with requests of mixed
lengths joining and leaving mid-flight.

Why transformers' `GlmForCausalLM` (model_type "glm") is the reference for ChatGLM checkpoints:
it is the port of the same GLM-4 architecture (THUDM's glm-4-9b-chat-hf is ChatGLM's weights
renamed): RMSNorm pre-norm blocks, q/k/v with bias and no bias elsewhere, grouped K/V heads,
SwiGLU on a fused [gate | up] projection, and RoPE on the first half of each head
(partial_rotary_factor 0.5) with adjacent-pair rotation and base rope_theta = 10000 * rope_ratio
— the math of ChatGLM's RotaryEmbedding(head_dim // 2) and apply_rotary_pos_emb. Only names and
the q/k/v fusion differ, which `chatglm_to_transformers` undoes.
"""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.checkpoint_errors import CheckpointError
from models.glm_voice.loading import load_glm_voice
from models.glm_voice.presets import ensure_tiny_glm_voice
from models.glm_voice.prompt import AssistantTurn, UserTurn
from models.loader import iter_safetensors, read_config

TEXTS = [
    "Hello there.",
    "What is the weather like today?",
    "Hi!",
    "Tell me a short story about a lighthouse keeper and a storm.",
    "One, two, three.",
]


def chatglm_to_transformers(cfg: dict, tensors: dict[str, torch.Tensor]):
    """A ChatGLM config + tensors → transformers' GlmConfig + GlmForCausalLM state dict."""
    from transformers import GlmConfig

    heads, d, groups = cfg["num_attention_heads"], cfg["kv_channels"], cfg["multi_query_group_num"]
    config = GlmConfig(
        vocab_size=cfg["padded_vocab_size"],
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["ffn_hidden_size"],
        num_hidden_layers=cfg["num_layers"],
        num_attention_heads=heads,
        num_key_value_heads=groups,
        head_dim=d,
        rms_norm_eps=cfg["layernorm_epsilon"],
        max_position_embeddings=cfg["seq_length"],
        attention_bias=True,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=None,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0 * cfg["rope_ratio"],
            "partial_rotary_factor": 0.5,
        },
    )
    out = {
        "model.embed_tokens.weight": tensors["transformer.embedding.word_embeddings.weight"],
        "model.norm.weight": tensors["transformer.encoder.final_layernorm.weight"],
        "lm_head.weight": tensors["transformer.output_layer.weight"],
    }
    for i in range(cfg["num_layers"]):
        src, dst = f"transformer.encoder.layers.{i}.", f"model.layers.{i}."
        for leaf in ("weight", "bias"):
            q, k, v = tensors[f"{src}self_attention.query_key_value.{leaf}"].split(
                [heads * d, groups * d, groups * d]
            )
            out |= {
                f"{dst}self_attn.q_proj.{leaf}": q,
                f"{dst}self_attn.k_proj.{leaf}": k,
                f"{dst}self_attn.v_proj.{leaf}": v,
            }
        out |= {
            f"{dst}self_attn.o_proj.weight": tensors[f"{src}self_attention.dense.weight"],
            f"{dst}input_layernorm.weight": tensors[f"{src}input_layernorm.weight"],
            f"{dst}post_attention_layernorm.weight": tensors[
                f"{src}post_attention_layernorm.weight"
            ],
            f"{dst}mlp.gate_up_proj.weight": tensors[f"{src}mlp.dense_h_to_4h.weight"],
            f"{dst}mlp.down_proj.weight": tensors[f"{src}mlp.dense_4h_to_h.weight"],
        }
    return config, out


@pytest.fixture(scope="module")
def glm_dir():
    return ensure_tiny_glm_voice() / "glm-4-voice-9b"


@pytest.fixture(scope="module")
def hf_glm(glm_dir):
    from transformers import GlmForCausalLM

    config, state = chatglm_to_transformers(read_config(glm_dir), dict(iter_safetensors(glm_dir)))
    model = GlmForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    return model


def hf_generate(model, prompt: list[int], n: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


def test_engine_greedy_tokens_equal_transformers_glm(glm_dir, hf_glm):
    model = load_glm_voice(str(glm_dir), torch.device("cpu"), torch.float32)
    config = EngineConfig(max_num_seqs=3, max_batch_tokens=48, num_kv_blocks=256, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    lengths = [12, 25, 7, 30, 16]
    specs = [
        SpeechRequest(
            text,
            sampling=SamplingParams(
                temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n
            ),
        )
        for text, n in zip(TEXTS, lengths, strict=True)
    ]
    pending, requests, finished, step = list(specs), [], {}, 0
    while pending or core.has_work():
        if pending and step % 3 == 0:
            requests.append(core.add_request(pending.pop(0)))
        for event in core.step():
            if isinstance(event, Finished):
                finished[event.request_id] = event
        step += 1
    assert len(finished) == len(specs)
    for req, n in zip(requests, lengths, strict=True):
        assert finished[req.request_id].reason == FinishReason.LENGTH
        assert req.output_ids == hf_generate(hf_glm, req.prompt_ids, n), req.request_id
        assert len(set(req.output_ids)) > 3  # not a degenerate loop that any RoPE would give
    assert core.blocks.num_used == 0


def test_prompt_format_and_prefix_property(glm_dir):
    model = load_glm_voice(str(glm_dir), torch.device("cpu"), torch.float32)
    ids, tok = model.ids, model.tokenizer
    first = UserTurn(speech_tokens=(3, 1, 4))
    one = model.preprocess_turns([first]).token_ids
    text = tok.decode(one, skip_special_tokens=False)
    assert text.startswith(
        "[gMASK]<sop><|system|>\nUser will provide you with a speech instruction."
    )
    assert text.endswith(
        "<|user|>\n<|begin_of_audio|><|audio_3|><|audio_1|><|audio_4|>"
        "<|end_of_audio|><|assistant|>streaming_transcription\n"
    )
    reply = (ids.audio_base + 7, *tok.encode("ok", add_special_tokens=False).ids, ids.user)
    two = model.preprocess_turns([first, AssistantTurn(reply), UserTurn(text="and?")]).token_ids
    assert two[: len(one)] == one  # the first turn's KV is a prefix of the second's
    assert two[len(one) : len(one) + 3] == list(reply[:3]) and two[len(one) + 3] == ids.user


def test_wrong_layouts_are_named(glm_dir):
    from models.glm_voice.backbone import build_glm_backbone, load_chatglm_weights

    cfg = read_config(glm_dir)
    tensors = dict(iter_safetensors(glm_dir))
    llm = build_glm_backbone(cfg, torch.device("cpu"), torch.float32)
    dropped = {k: v for k, v in tensors.items() if "final_layernorm" not in k}
    with pytest.raises(CheckpointError, match="missing tensors.*norm.weight"):
        load_chatglm_weights(llm, dropped.items())
    with pytest.raises(CheckpointError, match="unexpected tensor 'transformer.extra'"):
        load_chatglm_weights(llm, [*tensors.items(), ("transformer.extra", torch.zeros(1))])
    with pytest.raises(CheckpointError, match="add_bias_linear"):
        build_glm_backbone({**cfg, "add_bias_linear": True}, torch.device("cpu"), torch.float32)
