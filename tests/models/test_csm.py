"""CSM through the engine: greedy frames equal transformers' `CsmForConditionalGeneration.generate`
on the same weights (plain prompts and a voice prompt with reference audio), with six requests
decoding together; seeded sampling, the end frame, prompt layout and checkpoint errors."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.csm import prompt as P
from models.csm.loading import load_csm

K = 32
SPF = 1920
AUDIO_TOKEN, AUDIO_EOS_TOKEN = 128002, 128003
TEXTS = [
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "Hi!",
    "Streaming audio should start quickly.",
    "One, two, three.",
    "Good morning, how can I help you today?",
]


def load(folder, constrain: bool = True):
    return load_csm(
        str(folder), torch.device("cpu"), torch.float32, name="tiny-csm", constrain_codes=constrain
    )


@pytest.fixture(scope="module")
def hf_csm(tiny_csm_dir):
    from transformers import CsmForConditionalGeneration

    return CsmForConditionalGeneration.from_pretrained(
        str(tiny_csm_dir), dtype=torch.float32
    ).eval()


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n)


def run(core: EngineCore, specs: list[SpeechRequest], per_step: int = 2):
    """Admit `per_step` requests a step, so they join a running batch and leave it at
    different times; return the requests, their audio, their finish events and the largest
    batch."""
    pending, requests, audio, finished = list(specs), [], {}, {}
    step = peak = 0
    while pending or core.has_work():
        for _ in range(min(per_step, len(pending))):
            requests.append(core.add_request(pending.pop(0)))
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, Finished):
                finished[event.request_id] = event
        peak = max(peak, core.last_timing.batch_size)
        step += 1
    pcm = {rid: np.concatenate(chunks) for rid, chunks in audio.items()}
    return requests, pcm, finished, peak


def hf_input_ids(rows: list[tuple[int, ...]]) -> torch.Tensor:
    """Our prompt rows as transformers' CsmProcessor lays them out: text tokens, `<|AUDIO|>` per
    context frame, `<|audio_eos|>` for the end-of-audio frame."""
    ids = []
    for row in rows:
        if row[K] >= 0:
            ids.append(row[K])
        elif all(c == 0 for c in row[:K]):
            ids.append(AUDIO_EOS_TOKEN)
        else:
            ids.append(AUDIO_TOKEN)
    return torch.tensor([ids])


def hf_generate(hf_csm, rows, n: int, **audio) -> list[list[int]]:
    ids = hf_input_ids(rows)
    # The processor's attention mask goes along: without one, generate() derives it from
    # pad_token_id, which CSM's config sets to the <|AUDIO|> id, masking the context audio.
    out = hf_csm.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n,
        do_sample=False,
        depth_decoder_do_sample=False,
        **audio,
    )
    return out[0].tolist()


def frames_of(request) -> list[list[int]]:
    return [list(row[:K]) for row in request.output_ids]


def test_greedy_frames_equal_transformers_generate(tiny_csm_dir, hf_csm):
    # Unconstrained: transformers samples all 2051 ids of each codebook, so must we to compare.
    model = load(tiny_csm_dir, constrain=False)
    config = EngineConfig(max_num_seqs=8, max_batch_tokens=64, num_kv_blocks=128, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    lengths = [4, 7, 3, 6, 5, 4]
    specs = [
        SpeechRequest(t, voice=str(i % 2), sampling=greedy(n))
        for i, (t, n) in enumerate(zip(TEXTS, lengths, strict=True))
    ]
    requests, pcm, finished, peak = run(core, specs)
    assert peak == 6  # all six decode side by side at some step
    for req, n in zip(requests, lengths, strict=True):
        assert finished[req.request_id].reason == FinishReason.LENGTH
        assert frames_of(req) == hf_generate(hf_csm, req.prompt_ids, n), req.request_id
        assert all(row[K] == P.ABSENT for row in req.output_ids)
        # Streamed audio: every decodable frame (codes < 2048) once, 80 ms each.
        decodable = sum(max(f) < 2048 for f in frames_of(req))
        assert len(pcm.get(req.request_id, [])) == decodable * SPF
    assert core.blocks.num_used == 0


def test_voice_prompt_equals_transformers_with_context_audio(tiny_csm_dir, hf_csm):
    model = load(tiny_csm_dir, constrain=False)
    rng = np.random.default_rng(0)
    reference = (0.1 * rng.standard_normal(int(0.6 * 24000))).astype(np.float32)
    model.add_voice("narrator", "This is how I sound.", reference, speaker=1)
    assert "narrator" in model.facts.voices
    core = EngineCore(model, EngineConfig(num_kv_blocks=128), torch.device("cpu"), "sdpa")
    specs = [
        SpeechRequest("Hello there.", voice="narrator", sampling=greedy(5)),
        SpeechRequest("Hello there.", voice="1", sampling=greedy(5)),
    ]
    (voiced, plain), _, _, _ = run(core, specs)
    context = P.turn_ids(model.tokenizer, 1, "This is how I sound.")
    frames = model.detok.encode(reference)  # 0.6 s: 8 frames, and the end-of-audio frame
    assert len(voiced.prompt_ids) == len(context) + len(frames) + 1 + len(plain.prompt_ids)
    audio = {
        "input_values": torch.from_numpy(reference)[None, None],
        "input_values_cutoffs": torch.tensor([[len(reference)]]),
    }
    assert frames_of(voiced) == hf_generate(hf_csm, voiced.prompt_ids, 5, **audio)
    assert frames_of(voiced) != frames_of(plain)  # the context changes what is said


def test_seeded_sampling_is_reproducible_whatever_the_batch(tiny_csm_dir):
    model = load(tiny_csm_dir)
    params = SamplingParams(temperature=0.9, top_k=50, seed=7, max_tokens=4, min_tokens=4)

    def frames_with_company(n_others: int, seed: int = 7):
        core = EngineCore(model, EngineConfig(num_kv_blocks=128), torch.device("cpu"), "sdpa")
        target = core.add_request(
            SpeechRequest("Hello there.", sampling=replace(params, seed=seed))
        )
        for i in range(n_others):
            core.add_request(SpeechRequest(TEXTS[i], sampling=SamplingParams(max_tokens=3)))
        while core.has_work():
            core.step()
        return frames_of(target)

    alone = frames_with_company(0)
    assert alone == frames_with_company(3)
    assert alone != frames_with_company(0, seed=8)
    assert all(max(f) < 2048 for f in alone)  # constrained: every code decodes
    assert len({c for f in alone for c in f[1:]}) > 20  # codebooks 1..31 are sampled, not argmax


def test_end_frame_stops_generation_and_is_not_audio(tiny_csm_dir, monkeypatch):
    model = load(tiny_csm_dir)
    core = EngineCore(model, EngineConfig(num_kv_blocks=64), torch.device("cpu"), "sdpa")
    real_depth = model.depth_stage
    calls = []

    def third_frame_ends(hidden, first, sample):
        frames = real_depth(hidden, first, sample)
        calls.append(1)
        if len(calls) == 3:  # transformers' rule: all codebooks but the last are the EOS code
            frames[:, : K - 1] = 0
            frames[:, K - 1] = 5
        return frames

    monkeypatch.setattr(model, "depth_stage", third_frame_ends)
    (req,), pcm, finished, _ = run(
        core, [SpeechRequest("Hello there.", sampling=SamplingParams(max_tokens=10))]
    )
    assert finished[req.request_id].reason == FinishReason.STOP
    assert len(req.output_ids) == 3 and model.is_stop(req.output_ids[-1])
    assert len(pcm[req.request_id]) == 2 * SPF  # the end frame is a marker, not audio

    # Before min_tokens, codebook 0 may not be the EOS code, so no frame can end generation.
    cands = model.candidate_logits(torch.randn(2, model.shape.hidden_size), [0, 0], [False, True])
    assert cands.logits.shape == (2, 2048)
    assert cands.logits[0, 0] == float("-inf") and cands.logits[1, 0] > float("-inf")


def test_prompt_layout(tiny_csm_dir):
    model = load(tiny_csm_dir)
    rows = model.preprocess("Hi.", "1").token_ids
    text = model.tokenizer.encode("[1]Hi.", add_special_tokens=False).ids
    assert [r[K] for r in rows] == [P.BEGIN_OF_TEXT, *text, P.END_OF_TEXT]
    assert all(r[:K] == (P.ABSENT,) * K for r in rows)
    clip = np.zeros(4800, np.float32)
    assert model.facts.voice_cloning and model.facts.clip_voices == ()
    model.add_voice("clip", "Said before.", clip, speaker=0)
    assert model.facts.clip_voices == ("clip",) and model.facts.voices == ("0", "1", "clip")
    voiced = model.preprocess("Hi.", "clip").token_ids
    said = P.turn_ids(model.tokenizer, 0, "Said before.")
    codes = model.detok.encode(clip)
    assert [r[K] for r in voiced[: len(said)]] == said
    audio = voiced[len(said) : len(said) + len(codes) + 1]
    assert [list(r[:K]) for r in audio[:-1]] == codes.tolist()
    assert all(r[K] == P.ABSENT for r in audio)
    assert audio[-1][:K] == (0,) * K  # the end-of-audio frame
    assert voiced[len(said) + len(codes) + 1 :] == model.preprocess("Hi.", "0").token_ids
    with pytest.raises(ModelInputError, match="unknown voice 'nobody'.*0, 1, clip"):
        model.preprocess("Hi.", "nobody")
    with pytest.raises(ModelInputError, match="text is empty"):
        model.preprocess("  ", None)


def test_checkpoint_errors_name_the_problem(tiny_csm_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "csm"
    shutil.copytree(tiny_csm_dir, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["depth_decoder.model.inputs_embeds_projector.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        CheckpointError, match="missing tensors: depth_decoder.model.inputs_embeds_projector.weight"
    ):
        load(folder)

    tensors = {k: v for k, v in tensors.items() if not k.startswith("codec_model.")}
    tensors["depth_decoder.model.inputs_embeds_projector.weight"] = torch.zeros(32, 64)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="no codec_model"):
        load(folder)

    (folder / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(CheckpointError, match="not a CSM checkpoint"):
        load(folder)


def test_config_without_default_fields_loads_as_transformers_reads_it(tiny_csm_dir, tmp_path):
    """transformers 4.x saved config.json with `use_diff`: fields equal to CsmConfig's defaults
    (num_codebooks, vocab_size, the token ids …) are absent and must come from those defaults."""
    import json

    from transformers import CsmConfig

    defaults = CsmConfig().to_dict()
    full = json.loads((tiny_csm_dir / "config.json").read_text())
    sparse = {
        k: v
        for k, v in full.items()
        if k == "model_type" or isinstance(v, dict) or v != defaults.get(k)
    }
    assert {"num_codebooks", "vocab_size", "text_vocab_size"} <= set(full) - set(sparse)
    folder = tmp_path / "sparse"
    shutil.copytree(tiny_csm_dir, folder)
    (folder / "config.json").write_text(json.dumps(sparse))
    a, b = load(tiny_csm_dir), load(folder)
    assert a.facts == b.facts and a.shape == b.shape
    theirs = b.backbone.state_dict()
    for name, p in a.backbone.state_dict().items():
        assert torch.equal(p, theirs[name]), name
