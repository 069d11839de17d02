"""voxgate-tiny: its published layout loads through the real loader; greedy rows through the
engine (paged KV, several requests joining mid-flight) equal a from-scratch reference that runs
transformers' LlamaModel on the same weights; the training forward equals it too."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.checkpoint_errors import CheckpointError
from models.codecs.voxcodec import VoxCodecConfig
from models.voxgate_tiny.checkpoint import load_checkpoint, write_random_checkpoint
from models.voxgate_tiny.config import tiny_config_dict
from models.voxgate_tiny.lm import DenseCausalAttention
from models.voxgate_tiny.loading import load_voxgate_tiny
from models.voxgate_tiny.text import CharTokenizer

CODEC = VoxCodecConfig(
    encoder_dim=32, encoder_blocks=1, decoder_dim=32, decoder_blocks=1, fine_dim=16, fine_blocks=1
)
TEXTS = ["Hello there.", "The train leaves at 7:30, so hurry!", "Would you like some tea?"]


@pytest.fixture(
    scope="module",
    params=[(False, 0), (True, 0), (True, 64)],
    ids=["plain", "reading", "positions"],
)
def checkpoint(tmp_path_factory, request):
    """A random model of each layout: without and with the reading column, and with the
    pointer's symbol index embedded (lm.py)."""
    folder = tmp_path_factory.mktemp("voxgate-tiny")
    config = tiny_config_dict(
        CODEC,
        CharTokenizer().vocab_size,
        hidden=64,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=96,
        depth_intermediate=48,
        max_positions=256,
        reading=request.param[0],
        pointer_positions=request.param[1],
    )
    files = write_random_checkpoint(folder, config, seed=7)
    assert {f.name for f in files} >= {"config.json", "tokenizer.json", "model.safetensors"}
    return folder


def hf_backbone(folder, lm):
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaModel

    cfg = json.loads((folder / "config.json").read_text())
    hf = LlamaModel(
        LlamaConfig(
            vocab_size=8,
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=cfg["num_attention_heads"],
            num_key_value_heads=cfg["num_key_value_heads"],
            head_dim=cfg["head_dim"],
            rms_norm_eps=cfg["rms_norm_eps"],
            rope_theta=cfg["rope_theta"],
            max_position_embeddings=cfg["max_position_embeddings"],
        )
    ).eval()
    state = load_file(str(folder / "model.safetensors"))
    layers = {
        k.removeprefix("model."): v
        for k, v in state.items()
        if k.startswith("model.layers.") or k == "model.norm.weight"
    }
    missing, unexpected = hf.load_state_dict(layers, strict=False)
    assert missing == ["embed_tokens.weight"] and not unexpected
    return hf


@torch.no_grad()
def reference_greedy(hf, model, prompt: list[tuple[int, ...]], n: int) -> list[tuple[int, ...]]:
    """Every step recomputes the whole sequence with transformers' Llama: no KV cache at all.
    With reading, the sampled advance moves the pointer as the model's follow_row does."""
    lm = model.lm
    rows, out = list(prompt), []
    for _ in range(n):
        h = hf(inputs_embeds=lm.embed(torch.tensor(rows))[None]).last_hidden_state[0, -1:]
        logits = lm.first_logits(h)
        logits[:, lm.eos] = float("-inf")  # min_tokens: no stop
        codes, advance = lm.depth.generate(h, logits.argmax(-1), lambda lg, i: lg.argmax(-1))
        if advance is None:
            row = (*codes[0].tolist(), -1)
        else:
            row = model.follow_row(prompt, out, (*codes[0].tolist(), int(advance[0]), -1, -1))
        out.append(row)
        rows.append(row)
    return out


def test_engine_greedy_rows_equal_transformers_reference(checkpoint):
    model = load_voxgate_tiny(checkpoint, torch.device("cpu"), torch.float32)
    hf = hf_backbone(checkpoint, model.lm)
    core = EngineCore(
        model,
        EngineConfig(
            max_batch_tokens=24, num_kv_blocks=64, block_size=16, realtime_admission=False
        ),
        torch.device("cpu"),
        "sdpa",
    )
    lengths = [9, 14, 6]
    requests, audio = [], {}
    pending = list(zip(TEXTS, lengths, strict=True))
    step = 0
    while pending or core.has_work():
        if pending and step % 2 == 0:
            text, n = pending.pop(0)
            params = SamplingParams(
                temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n
            )
            requests.append(core.add_request(SpeechRequest(text, None, params)))
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
        step += 1
    for req, text, n in zip(requests, TEXTS, lengths, strict=True):
        expected = reference_greedy(hf, model, model.prompt_rows(text), n)
        assert req.output_ids == expected
        pcm = np.concatenate(audio[req.request_id])
        assert pcm.shape == (2 * n * CODEC.hop_length,) and np.isfinite(pcm).all()


def test_training_forward_equals_transformers(checkpoint):
    from training.speechlm_data import Utterance, make_batch

    _, lm, _, tokenizer = load_checkpoint(checkpoint, torch.device("cpu"), torch.float32)
    hf = hf_backbone(checkpoint, lm)
    rng = np.random.default_rng(0)
    utts = [
        Utterance(
            tokenizer.encode(t), rng.integers(0, 1000, (n, lm.num_codebooks)).astype(np.uint16)
        )
        for t, n in (("hi there.", 5), ("a longer one, see?", 9))
    ]
    batch = make_batch(utts, lm.num_codebooks, lm.eos)
    b, length, width = batch["rows"].shape
    with torch.no_grad():
        hidden = lm(
            batch["rows"].view(-1, width),
            torch.arange(length).repeat(b),
            DenseCausalAttention(b, length),
        ).view(b, length, -1)
        for i, u in enumerate(utts):
            rows = batch["rows"][i, : len(u)]
            ref = hf(inputs_embeds=lm.embed(rows)[None]).last_hidden_state[0]
            torch.testing.assert_close(hidden[i, : len(u)], ref, rtol=1e-4, atol=1e-5)
    # Targets: the last text row predicts frame 0, the last frame predicts end-of-audio.
    t0 = len(utts[0].text_ids)
    assert batch["first"][0, t0 - 1] == int(utts[0].codes[0, 0])
    assert batch["first"][0, t0 - 1 + 5] == lm.eos
    assert (batch["codes"][0, t0 - 1 + 5] == -100).all()


def test_stop_row_ends_generation_and_is_not_decoded(checkpoint):
    model = load_voxgate_tiny(checkpoint, torch.device("cpu"), torch.float32)
    frame_pair = (1, 2, 3, 4, 5, 6, 7, 8, -1)  # two codec frames a row
    stop = (model.lm.eos, *frame_pair[1:])
    assert model.is_stop(stop) and not model.is_stop(frame_pair)
    state = model.new_stream_state()
    audio = model.detokenize([state], [[frame_pair, stop]], [True])
    assert audio[0].shape == (2 * CODEC.hop_length,)
    from training.speechlm_data import group_frames

    rows = group_frames(np.arange(12).reshape(3, 4), 2)
    assert rows.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 8, 9, 10, 11]]


def test_bad_inputs_and_checkpoints_say_what_is_wrong(checkpoint, tmp_path):
    model = load_voxgate_tiny(checkpoint, torch.device("cpu"), torch.float32)
    from models.base import ModelInputError

    with pytest.raises(ModelInputError, match="voice"):
        model.preprocess("hello", "tara")
    with pytest.raises(ModelInputError, match="speakable"):
        model.preprocess(" ~~ ", None)
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in checkpoint.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    tok = json.loads((bad / "tokenizer.json").read_text())
    (bad / "tokenizer.json").write_text(json.dumps({**tok, "normalizer": "other-v9"}))
    with pytest.raises(CheckpointError, match="normaliser"):
        load_voxgate_tiny(bad, torch.device("cpu"), torch.float32)
    (bad / "tokenizer.json").write_text(json.dumps(tok))
    from safetensors.torch import load_file, save_file

    state = load_file(str(bad / "model.safetensors"))
    del state["depth.heads.0.weight"]
    save_file(state, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="depth.heads.0.weight"):
        load_voxgate_tiny(bad, torch.device("cpu"), torch.float32)


def test_cpu_int8_stays_close_to_fp32_and_serves_through_the_engine(checkpoint):
    """`--cpu-int8`: every Linear of the LM becomes int8, its outputs stay close to fp32, and
    the engine generates audio with it; a model without an int8 path is refused clearly."""
    from torch import nn

    from engine.factory import build_core
    from engine.request import ConfigError
    from models.registry import load_model

    fp32 = load_model(str(checkpoint))
    int8 = load_model(str(checkpoint))
    core = build_core(int8, EngineConfig(num_kv_blocks=64, cpu_int8=True), torch.device("cpu"))
    assert not any(type(m) is nn.Linear for m in int8.lm.modules())
    torch.manual_seed(0)
    hidden = torch.randn(32, int8.shape.hidden_size)
    with torch.inference_mode():
        a, b = fp32.compute_logits(hidden), int8.compute_logits(hidden)
    assert torch.nn.functional.cosine_similarity(a, b, dim=-1).min() > 0.98
    core.add_request(
        SpeechRequest(TEXTS[0], None, SamplingParams(max_tokens=4, min_tokens=4, seed=1))
    )
    samples = 0
    while core.has_work():
        samples += sum(len(e.pcm) for e in core.step() if isinstance(e, AudioChunk))
    assert samples > 0

    with pytest.raises(ConfigError, match="no int8 CPU path"):
        build_core(load_model("tiny-orpheus"), EngineConfig(cpu_int8=True), torch.device("cpu"))


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16])
def test_a_16_bit_checkpoint_loads_upcast_to_the_serving_dtype(tmp_path, stored):
    """Weights are shipped in 16 bits and served in the engine's dtype: on the CPU every
    parameter is float32 and holds exactly the stored value."""
    config = tiny_config_dict(CODEC, CharTokenizer().vocab_size, hidden=64, layers=2, heads=4)
    write_random_checkpoint(tmp_path / "fp32", config, seed=7, dtype=torch.float32)
    write_random_checkpoint(tmp_path / "half", config, seed=7, dtype=stored)
    full = load_voxgate_tiny(tmp_path / "fp32", torch.device("cpu"), torch.float32)
    half = load_voxgate_tiny(tmp_path / "half", torch.device("cpu"), torch.float32)
    for module_full, module_half in ((full.lm, half.lm), (full.detok.codec, half.detok.codec)):
        pairs = zip(module_full.state_dict().items(), module_half.state_dict().items(), strict=True)
        for (name, a), (_, b) in pairs:
            assert b.dtype == a.dtype, name
            if a.is_floating_point():
                assert torch.equal(b, a.to(stored).to(a.dtype)), name


def test_the_shipped_weights_are_stored_in_16_bits_within_the_budget():
    from models.loader import iter_safetensors
    from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

    if not (SHIPPED_WEIGHTS / "config.json").exists():
        pytest.skip("voxgate-tiny weights not shipped yet (training/README.md)")
    dtypes = {tensor.dtype for _, tensor in iter_safetensors(SHIPPED_WEIGHTS)}
    assert dtypes <= {torch.bfloat16, torch.float16}, dtypes
    total = sum(f.stat().st_size for f in SHIPPED_WEIGHTS.iterdir())
    assert total <= 60 * 10**6  # training/ship.py's budget
