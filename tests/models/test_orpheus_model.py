"""Orpheus checkpoint loading, token mapping, and streamed audio against a whole decode."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from engine.scheduler import ChunkingFacts
from models.checkpoint_errors import CheckpointError
from models.orpheus import tokens as T
from models.orpheus.configs import TINY_ORPHEUS
from models.orpheus.loading import load_orpheus
from models.orpheus.presets import write_orpheus_checkpoint
from models.registry import load_model

CPU = torch.device("cpu")


@pytest.fixture()
def checkpoint(tmp_path):
    folder = tmp_path / "orpheus"
    write_orpheus_checkpoint(folder, TINY_ORPHEUS, seed=99)
    return folder


def load(folder, codec_dir):
    return load_orpheus(str(folder), str(codec_dir), CPU, torch.float32)


def test_checkpoint_loads_back_identically(checkpoint, tiny_orpheus_dirs):
    saved = load_file(str(checkpoint / "model.safetensors"))
    llm = load(checkpoint, tiny_orpheus_dirs[1]).llm
    params = dict(llm.named_parameters())
    layer = llm.layers[1]
    q, k, v = layer.self_attn.qkv_proj.weight.split([64, 32, 32])
    assert torch.equal(q, saved["model.layers.1.self_attn.q_proj.weight"])
    assert torch.equal(k, saved["model.layers.1.self_attn.k_proj.weight"])
    assert torch.equal(v, saved["model.layers.1.self_attn.v_proj.weight"])
    gate, up = layer.mlp.gate_up_proj.weight.chunk(2)
    assert torch.equal(gate, saved["model.layers.1.mlp.gate_proj.weight"])
    assert torch.equal(up, saved["model.layers.1.mlp.up_proj.weight"])
    assert torch.equal(params["embed_tokens.weight"], saved["model.embed_tokens.weight"])
    assert llm.lm_head is None  # tied, as in orpheus-3b


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda f: (f / "config.json").unlink(), "lacks config.json"),
        (lambda f: (f / "tokenizer.json").unlink(), "lacks tokenizer.json"),
        (lambda f: (f / "model.safetensors").unlink(), "neither model.safetensors"),
        (lambda f: (f / "config.json").write_text("{not json"), "not valid JSON"),
    ],
)
def test_broken_checkpoint_names_what_is_wrong(checkpoint, tiny_orpheus_dirs, breakage, message):
    breakage(checkpoint)
    with pytest.raises(CheckpointError, match=message):
        load(checkpoint, tiny_orpheus_dirs[1])


def test_missing_tensor_is_named(checkpoint, tiny_orpheus_dirs):
    state = load_file(str(checkpoint / "model.safetensors"))
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, str(checkpoint / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=r"missing tensors: model\.layers\.1\.mlp\.up_proj\.weight"
    ):
        load(checkpoint, tiny_orpheus_dirs[1])


def test_config_weight_mismatch_is_named(checkpoint, tiny_orpheus_dirs):
    cfg = json.loads((checkpoint / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (checkpoint / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"mlp\.\w+_proj\.weight' has shape .*config implies"):
        load(checkpoint, tiny_orpheus_dirs[1])


def test_sharded_checkpoint_with_a_lost_shard(checkpoint, tiny_orpheus_dirs):
    state = load_file(str(checkpoint / "model.safetensors"))
    names = sorted(state)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    for shard, keys in halves.items():
        save_file({k: state[k] for k in keys}, str(checkpoint / shard))
    (checkpoint / "model.safetensors").unlink()
    weight_map = {k: shard for shard, keys in halves.items() for k in keys}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    assert load(checkpoint, tiny_orpheus_dirs[1]).llm is not None  # sharded layout loads
    (checkpoint / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="lacks shard"):
        load(checkpoint, tiny_orpheus_dirs[1])


def test_non_orpheus_checkpoint_and_unknown_names_are_refused(checkpoint, tmp_path):
    cfg = json.loads((checkpoint / "config.json").read_text())
    cfg["vocab_size"] = 32000
    (checkpoint / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="not a model Voxgate knows"):
        load_model(str(checkpoint))
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        load_model(str(tmp_path / "nowhere" / "x"))


def test_token_mapping_round_trips():
    frames = [[1, 2, 3, 4, 5, 6, 7], [4095, 0, 17, 9, 100, 2000, 3]]
    tokens = T.codes_to_tokens(frames)
    assert [T.code_of(t, i) for i, t in enumerate(tokens)] == [c for f in frames for c in f]
    assert T.code_of(tokens[0], 1) is None  # a slot-0 token is not a valid slot-1 code
    assert T.frame_to_snac(frames[0]) == [1, 2, 5, 3, 4, 6, 7]
    assert max(tokens) < T.AUDIO_END <= TINY_ORPHEUS["vocab_size"]


def test_prompt_layout_and_input_errors(tiny_orpheus_dirs):
    from models.base import ModelInputError

    model = load(*tiny_orpheus_dirs)
    ids = model.preprocess("Hi", "leo").token_ids
    assert ids[:2] == [T.START_OF_HUMAN, T.BEGIN_OF_TEXT]
    assert ids[-4:] == [T.END_OF_TEXT, T.END_OF_HUMAN, T.START_OF_AI, T.START_OF_SPEECH]
    assert bytes(ids[2:-4]).decode() == "leo: Hi"  # the tiny tokenizer is byte-level
    with pytest.raises(ModelInputError, match="empty"):
        model.preprocess("   ", None)
    with pytest.raises(ModelInputError, match="unknown voice"):
        model.preprocess("Hi", "nobody")


def test_streamed_engine_audio_equals_whole_snac_decode(tiny_orpheus_dirs):
    """Chunks come out of the batched, scheduled engine for several requests at once; stitched
    together they equal SNAC's decode of each request's whole code sequence (float
    rounding: the codec's decoder carries its state from chunk to chunk)."""
    model = load(*tiny_orpheus_dirs)
    # No cover margin: the first chunk goes out as soon as it exists. With the default, how
    # long it waits depends on this machine's step time, and a short request could finish
    # before its first chunk was due — one blob, which this test must not depend on (the
    # cover rule has its own tests in tests/engine/test_scheduler.py).
    config = EngineConfig(num_kv_blocks=128, max_detok_batch=2, first_audio_margin=0.0)
    core = EngineCore(model, config, CPU, "sdpa")
    lengths = [70, 49, 91]
    requests = [
        core.add_request(
            SpeechRequest(
                f"Sentence number {i}.", sampling=SamplingParams(seed=i, max_tokens=n, min_tokens=n)
            )
        )
        for i, n in enumerate(lengths)
    ]
    audio: dict[str, list[np.ndarray]] = {r.request_id: [] for r in requests}
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio[event.request_id].append(event.pcm)
    snac = model.detok.model
    for req, n in zip(requests, lengths, strict=True):
        chunks = audio[req.request_id]
        assert len(chunks) >= 2  # really streamed, not one blob
        streamed = np.concatenate(chunks)
        frames = np.array(
            [T.frame_to_snac(req.output_ids[i : i + 7]) for i in range(0, n, 7)]
        ) - np.array([T.AUDIO_BASE + p * T.CODEBOOK_SIZE for p in T.SNAC_ORDER])
        codes = [
            torch.from_numpy(frames[:, :1].reshape(1, -1)),
            torch.from_numpy(frames[:, 1:3].reshape(1, -1)),
            torch.from_numpy(frames[:, 3:].reshape(1, -1)),
        ]
        with torch.no_grad():
            whole = snac.decode(codes)[0, 0].numpy()
        assert streamed.shape == whole.shape == (n // 7 * 2048,)
        # A misplaced or lost frame costs an error of the order of the RMS itself.
        rms = float(np.sqrt(np.mean(whole**2)))
        assert float(np.max(np.abs(streamed - whole))) < 1e-4 * rms


def test_first_chunk_audio_the_scheduler_counts_on_is_what_snac_emits():
    """The first-chunk cover rule counts the chunk's audio as its tokens less the held-back
    ones: for SNAC that is the decoder's delay (2.32 frames) rounded up to whole tokens, so
    the count is never above the audio the codec gives, and short of it by under a token."""
    model = load_model("tiny-orpheus")
    facts, detok = model.facts, model.detok
    chunking = ChunkingFacts(
        facts.first_chunk_tokens,
        facts.chunk_tokens,
        1 / facts.token_rate_hz,
        facts.frame_tokens,
        facts.held_back_tokens,
    )
    samples_per_token = detok.samples_per_frame / T.CODES_PER_FRAME
    stream = detok.new_stream()
    detok.push(stream, np.zeros((detok.plan.first_audio_frames, 7), dtype=np.int64).tolist())
    (audio,) = detok.decode([stream], [False])
    counted = chunking.first_chunk_audio_tokens(facts.first_chunk_tokens)
    assert facts.held_back_tokens == 17
    assert 0 <= len(audio) - counted * samples_per_token < samples_per_token


def test_a_job_of_less_than_a_chunk_past_the_first_gives_its_frames_at_once():
    """The engine hands SNAC fewer tokens than a chunk, past a stream's first job, only for a
    listener about to run dry (Scheduler._detok_ready): those frames come out then, not when
    the chunk is whole; a full chunk's job and the first job are as before."""
    model = load_model("tiny-orpheus")
    code = T.AUDIO_BASE  # a valid code at each of a frame's 7 positions, offset by position
    frame = [code + i * T.CODEBOOK_SIZE for i in range(T.CODES_PER_FRAME)]
    state = model.new_stream_state()
    (first,) = model.detokenize([state], [frame * 6], [False])
    assert len(first) > 0 and state.snac.emitted == 4
    assert not model.detok.would_emit(state.snac, 3)  # whole chunks only, by the plan
    assert model.codec_would_emit(state, 3 * T.CODES_PER_FRAME)  # but a hurried job gives audio
    (hurried,) = model.detokenize([state], [frame * 3], [False])
    assert len(hurried) == 3 * model.detok.samples_per_frame and state.snac.emitted == 7
    (steady,) = model.detokenize([state], [frame * 4], [False])  # a full chunk: 4 frames
    assert len(steady) == 4 * model.detok.samples_per_frame and state.snac.emitted == 11


def test_snac_options_set_the_large_chunk_and_refuse_what_cannot_run():
    """`--snac-large-chunk-frames` reaches the codec's chunk schedule and the engine's facts
    (a comfortable listener waits for that many frames); `--snac-fp16` is a GPU's; the frame
    count is bounded by what the codec's graphs capture."""
    default = load_model("tiny-orpheus")
    assert default.facts.large_chunk_tokens == 8 * T.CODES_PER_FRAME
    model = load_model("tiny-orpheus", options={"snac_large_chunk_frames": 16})
    assert model.facts.large_chunk_tokens == 16 * T.CODES_PER_FRAME
    assert max(e - s for s, e in model.detok.plan.schedule(12)) == 16
    # `--snac-fp16` (the default) is CUDA's: on the CPU SNAC stays float32.
    assert {p.dtype for p in default.detok.model.parameters()} == {torch.float32}
    with pytest.raises(ValueError, match="snac_large_chunk_frames must be 4-16"):
        load_model("tiny-orpheus", options={"snac_large_chunk_frames": 2})
    # `--snac-chunk-ramp` reaches the chunk schedule: after 4 frames out, a 3-frame chunk.
    assert default.detok.plan.chunk_ramp == 1.0
    ramped = load_model("tiny-orpheus", options={"snac_chunk_ramp": 0.75})
    assert ramped.detok.plan.chunk_ramp == 0.75
    assert (4, 7) in ramped.detok.plan.schedule(12)
    with pytest.raises(ValueError, match=r"snac_chunk_ramp must be in \(0, 1\]"):
        load_model("tiny-orpheus", options={"snac_chunk_ramp": 1.2})
    with pytest.raises(CheckpointError, match="is for Orpheus models"):
        load_model("tiny-csm", options={"snac_fp16": True})
