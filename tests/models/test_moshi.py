"""Moshi through the engine: several full-duplex sessions joining and leaving a running batch,
each stepped once per frame on its own user audio, equal transformers' `MoshiForConditionalGeneration`
stepped frame by frame on the same audio and weights (greedy): text tokens, all 8 codebooks,
and the audio decoded from them. Plus checkpoint errors and the row layout."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from engine.api import EngineOverloaded
from engine.config import EngineConfig
from engine.duplex import DuplexEngine
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest, TextDelta
from engine.request import SamplingParams
from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.moshi import rows as R
from models.moshi.loading import load_moshi
from tests.models.test_mimi_encoder import speechlike

K, SPF, FRAME_S = 8, 1920, 0.08
TEXT_VOCAB, AUDIO_VOCAB = 32000, 2048


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def model(tiny_moshi_dir):
    return load_moshi(str(tiny_moshi_dir), torch.device("cpu"), torch.float32, name="tiny-moshi")


@pytest.fixture(scope="module")
def hf_moshi(tiny_moshi_dir):
    from transformers import MoshiForConditionalGeneration

    return MoshiForConditionalGeneration.from_pretrained(
        str(tiny_moshi_dir), dtype=torch.float32
    ).eval()


def greedy(frames: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=frames)


@torch.inference_mode()
def hf_reference(hf, audio: np.ndarray) -> tuple[list[int], list[list[int]], np.ndarray]:
    """transformers' Moshi stepped frame by frame: position 0 on initial tokens, position p+1 on
    the text and codes drawn at p and the user's frame p (transformers' delay pattern: acoustic
    codebooks one frame late, initial tokens where a delayed frame does not exist yet). Returns
    the text token and the 8 codes drawn at each position, and Moshi's audio (undelayed codes,
    one whole Mimi decode)."""
    n = len(audio) // SPF
    user = hf.audio_encoder.encode(
        torch.from_numpy(audio)[None, None], num_quantizers=K
    ).audio_codes[0]
    text_in = torch.tensor([[TEXT_VOCAB]])
    moshi_in = torch.full((1, K, 1), AUDIO_VOCAB)
    user_in = torch.full((1, K, 1), AUDIO_VOCAB)
    cache, texts, codes = None, [], []
    for p in range(n + 1):
        out = hf(
            input_ids=text_in,
            moshi_audio_codes=moshi_in,
            user_audio_codes=user_in,
            cache=cache,
            use_cache=True,
        )
        cache = out.cache
        text = out.logits[:, -1].argmax(-1)  # [1]
        drawn = hf.depth_decoder.generate(
            last_hidden_state=out.last_hidden_state[:, -1:],
            input_ids=text[:, None],
            min_length=K + 1,
            max_length=K + 1,
            do_sample=False,
        )[0, 1:]
        texts.append(int(text))
        codes.append(drawn.tolist())
        if p == n:
            break
        text_in = text[:, None]
        moshi_in = drawn.clone().view(1, K, 1)
        if p == 0:
            moshi_in[:, 1:] = AUDIO_VOCAB
        user_in = user[:, p].clone().view(1, K, 1)
        user_in[:, 1:, 0] = user[1:, p - 1] if p >= 1 else AUDIO_VOCAB
    frames = [[codes[i][0], *codes[i + 1][1:]] for i in range(n)]  # undo the acoustic delay
    pcm = hf.audio_encoder.decode(torch.tensor(frames).T[None]).audio_values[0, 0].numpy()
    return texts, codes, pcm


def test_sessions_through_the_engine_equal_transformers_stepped(model, hf_moshi):
    """Five sessions of 6-11 frames: joining on different ticks, one ended by its user, the
    others by their frame budget; every tick runs all live sessions as one batch."""
    clock = FakeClock()
    core = DuplexEngine(
        model, EngineConfig(num_kv_blocks=64, block_size=16), torch.device("cpu"), "sdpa", clock
    )
    lengths = [8, 6, 11, 7, 9]
    joins = [0, 0, 1, 3, 4]
    clips = [speechlike(n, seed=10 + i) for i, n in enumerate(lengths)]
    requests, sent, audio, texts, finished = {}, {}, {}, {}, {}
    peak = 0
    for tick in range(20):
        for i, join in enumerate(joins):
            if join == tick:
                # Session 1 is ended by its user; the rest stop at their frame budget (the
                # priming row plus one row per frame).
                frames = lengths[i] + 1 if i != 1 else 50
                requests[i] = core.add_request(SpeechRequest("", None, greedy(frames)))
                sent[i] = 0
        for i, request in requests.items():
            if sent[i] < lengths[i]:  # one frame per tick, in real time
                core.push_audio(request.request_id, clips[i][sent[i] * SPF : (sent[i] + 1) * SPF])
                sent[i] += 1
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, TextDelta):
                texts.setdefault(event.request_id, []).append(event.text)
            elif isinstance(event, Finished):
                finished[event.request_id] = event
        peak = max(peak, core.last_timing.batch_size)
        r1 = requests.get(1)
        if (
            r1 is not None
            and len(r1.output_ids) == lengths[1] + 1
            and r1.request_id not in finished
        ):
            for event in core.end_session(r1.request_id):
                finished[event.request_id] = event
        clock.now += FRAME_S
    assert not core.has_work() and peak >= 4
    assert core.blocks.num_used == 0 and core.reserved_blocks == 0
    totals = core.scheduler.totals
    assert totals.input_late == 0 and totals.input_dropped == 0
    for i, request in requests.items():
        rid = request.request_id
        ref_texts, ref_codes, ref_pcm = hf_reference(hf_moshi, clips[i])
        rows = request.output_ids
        assert len(rows) == lengths[i] + 1
        assert [r[R.TEXT] for r in rows] == ref_texts
        # Row 0's acoustic codes belong to frame -1 and are replaced by initial tokens.
        assert [r[R.MOSHI] for r in rows] == [c[0] for c in ref_codes]
        assert [list(r[R.MOSHI + 1 : R.MOSHI + K]) for r in rows[1:]] == [
            c[1:] for c in ref_codes[1:]
        ]
        pcm = np.concatenate(audio[rid])
        assert pcm.shape == ref_pcm.shape == (lengths[i] * SPF,)
        assert np.abs(pcm - ref_pcm).max() <= 1e-4 * np.sqrt(np.mean(ref_pcm**2))
        expected = FinishReason.STOP if i == 1 else FinishReason.LENGTH
        assert finished[rid].reason == expected
        pieces = [model.text_piece(r) for r in rows]
        assert "".join(texts.get(rid, [])) == "".join(pieces)


def test_a_session_the_kv_pool_cannot_hold_is_refused_and_counted_as_kv(model):
    """Refused at submit (the gateway's `overloaded`), and counted by cause on /metrics
    (EngineStats.admission.refusals); the sessions that fit are not counted."""
    core = DuplexEngine(
        model,
        EngineConfig(num_kv_blocks=4, block_size=16),
        torch.device("cpu"),
        "sdpa",
        FakeClock(),
    )
    core.add_request(SpeechRequest("", None, greedy(8)))
    with pytest.raises(EngineOverloaded):
        core.add_request(SpeechRequest("", None, greedy(200)))
    stats = core.stats()
    assert stats.admission.refusals == {"kv": 1} and stats.admission.streams == 1
    assert stats.realtime_room  # a duplex engine admits by its KV pool alone
    # ... and says what a new session reserves: the model's whole context, for the gateway
    # to refuse a session at start rather than at its first frame.
    assert stats.kv_blocks_per_session == -(-model.facts.max_context // 16)


def test_sessions_beyond_max_num_seqs_are_refused_not_stepped(model):
    """Every session steps in every frame, so one past --max-num-seqs is refused at submit
    (the step's graphs and page table are sized for max_num_seqs rows; 129 rows once crashed
    the served engine), and the stats tell the gateway to refuse new sessions at start."""
    core = DuplexEngine(
        model,
        EngineConfig(num_kv_blocks=64, block_size=16, max_num_seqs=2),
        torch.device("cpu"),
        "sdpa",
        FakeClock(),
    )
    first = core.add_request(SpeechRequest("", None, greedy(8)))
    assert core.stats().realtime_room
    core.add_request(SpeechRequest("", None, greedy(8)))
    with pytest.raises(EngineOverloaded, match="at most 2 sessions"):
        core.add_request(SpeechRequest("", None, greedy(8)))
    stats = core.stats()
    assert stats.admission.refusals == {"max_num_seqs": 1}
    assert stats.realtime_refusal == "max_num_seqs"
    core.end_session(first.request_id)
    assert core.stats().realtime_room
    core.add_request(SpeechRequest("", None, greedy(8)))  # room again once one has left


def test_session_rejects_text_and_voices(model):
    with pytest.raises(ModelInputError, match="speech-to-speech"):
        model.preprocess("hello", None)
    with pytest.raises(ModelInputError, match="single voice"):
        model.preprocess("", "alice")


def test_missing_tensor_is_named(tiny_moshi_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    shutil.copytree(tiny_moshi_dir, folder)
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["depth_decoder.lm_heads.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="depth_decoder.lm_heads.weight"):
        load_moshi(str(folder), torch.device("cpu"), torch.float32)


def test_next_input_row_applies_the_delays():
    sampled = R.sampled_row(7, list(range(10, 18)), K)
    first = R.next_input_row(sampled, 0, list(range(20, 28)), None, AUDIO_VOCAB)
    assert first == (7, 10, *[AUDIO_VOCAB] * 7, 20, *[AUDIO_VOCAB] * 7)
    later = R.next_input_row(sampled, 5, list(range(20, 28)), list(range(30, 38)), AUDIO_VOCAB)
    assert later == (7, *range(10, 18), 20, *range(31, 38))


def test_moshi_loads_without_the_snac_package(monkeypatch):
    """Only Orpheus needs `snac`; a GPU image without it must still serve Moshi (it did not: the
    registry imported the Orpheus loader first, whatever the model)."""
    import builtins
    import sys

    from models.registry import load_model

    real_import = builtins.__import__

    def no_snac(name, *args, **kwargs):
        if name == "snac" or name.startswith("snac."):
            raise ModuleNotFoundError("No module named 'snac'")
        return real_import(name, *args, **kwargs)

    for name in [
        m
        for m in sys.modules
        if m == "snac" or m.startswith(("snac.", "models.orpheus", "models.codecs.snac"))
    ]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", no_snac)
    model = load_model("tiny-moshi")
    assert model.facts.token_rate_hz == 12.5
