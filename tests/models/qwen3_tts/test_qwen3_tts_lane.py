"""Qwen3-TTS's first-chunk lane (models/qwen3_tts/lane.py; tiny preset, fp32 on the CPU): the
decoder's second context shares the state slots, so a stream goes on in whichever context
runs its chunk, alone, batched, or on two threads at once while the slots grow; and through
the engine's threaded detokenizer first chunks go out on the lane while a steady job is held,
their audio the model's own detokenizer's."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.detok_pipeline import make_detokenizer
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.codecs.slot_states import StateSlots
from models.qwen3_tts.codec_streams import LANE_GRAPH_ROWS, CodecStreams
from models.qwen3_tts.family import Qwen3TtsLoadOptions
from tests.cpu_graphs import EagerGraphs
from tests.models.lane_codecs import held_lane_engine, run_until
from tests.models.qwen3_tts.test_qwen3_tts_codec_streams import ROUNDING, random_codes, whole

CPU = torch.device("cpu")


def small_slots(*contexts: CodecStreams) -> None:
    """Give the contexts one new StateSlots of 2 rows (scratch + one stream), so streams grow
    it (the graphs read a staging buffer, not the slots, so they stay valid)."""
    slots = StateSlots(contexts[0].slots._fresh, capacity=2)
    for context in contexts:
        context.slots = slots


def test_streams_go_on_in_either_context_as_the_slots_grow(model):
    """Four streams, one an in-context clone, each chunk decoded by the steady context or the
    lane (in turn, batched with whichever others share its frame count), with graphs as the
    CPU replays them; the slots grow twice on the way. Each stream's audio is its whole
    decode's."""
    steady = CodecStreams(model.decoder)
    lane = steady.twin()
    assert lane.slots is steady.slots and lane.graph_rows == LANE_GRAPH_ROWS
    steady.enable_cuda_graphs(EagerGraphs(deferred=True))
    lane.enable_cuda_graphs(EagerGraphs(deferred=True))
    small_slots(steady, lane)
    clip = random_codes(model, 5, seed=20)
    codes = [random_codes(model, 10, seed=21 + i) for i in range(4)]
    streams = [steady.new_stream(clip.numpy() if i == 3 else None) for i in range(4)]
    audio: list[list[np.ndarray]] = [[] for _ in range(4)]
    at = [0] * 4
    rounds = [(lane, [0], 2), (steady, [0], 4), (lane, [1, 2, 3], 2), (steady, [0, 1], 4),
              (lane, [2, 3], 4), (steady, [1, 2, 3], 4), (lane, [0], 4)]  # fmt: skip
    generations = []
    for context, members, frames in rounds:
        pieces = [codes[i][at[i] : at[i] + frames].tolist() for i in members]
        got = context.decode([streams[i] for i in members], pieces)
        for i, pcm in zip(members, got, strict=True):
            audio[i].append(pcm)
            at[i] += frames
        generations.append(steady.slots.generation)
    assert generations[-1] > generations[0]  # the slots grew while both contexts used them
    for i in range(4):
        got = np.concatenate(audio[i])
        if i == 3:  # the clone's speech continues its clip, whose audio is dropped
            want = whole(model, torch.cat([clip, codes[i][: at[i]]]))[5 * 1920 :]
        else:
            want = whole(model, codes[i][: at[i]])
        np.testing.assert_allclose(got, want, atol=ROUNDING, rtol=0)


def test_two_contexts_decode_on_two_threads_at_once(model):
    """The steady context and the lane, each on its own thread, decode streams of their own
    chunk by chunk while new streams keep taking rows (the slots grow under both); then each
    context goes on with the other's streams. Every stream's audio is its whole decode's."""
    steady = CodecStreams(model.decoder)
    lane = steady.twin()
    small_slots(steady, lane)
    n, frames = 6, 8
    codes = [random_codes(model, 2 * frames, seed=40 + i) for i in range(2 * n)]
    streams = [steady.new_stream() for _ in range(2 * n)]
    audio: list[list[np.ndarray]] = [[] for _ in range(2 * n)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def work(context: CodecStreams, mine: list[int], half: int) -> None:
        try:
            start.wait()
            for f in range(half * frames, (half + 1) * frames, 2):
                for i in mine:  # one new stream a call at first: its row taken mid-run
                    (pcm,) = context.decode([streams[i]], [codes[i][f : f + 2].tolist()])
                    audio[i].append(pcm)
        except BaseException as exc:
            errors.append(exc)

    evens, odds = list(range(0, 2 * n, 2)), list(range(1, 2 * n, 2))
    for half, (a, b) in enumerate(((evens, odds), (odds, evens))):
        threads = [
            threading.Thread(target=work, args=(steady, a, half)),
            threading.Thread(target=work, args=(lane, b, half)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
    assert steady.slots.capacity > 2 * n  # grew from 2 while the threads ran
    for i in range(2 * n):
        np.testing.assert_allclose(
            np.concatenate(audio[i]), whole(model, codes[i]), atol=ROUNDING, rtol=0
        )


def spec(model, n: int, seed: int) -> SpeechRequest:
    return SpeechRequest(
        "Hello there.",
        model.facts.default_voice,
        SamplingParams(seed=seed, max_tokens=n, min_tokens=n),
    )


def test_first_chunks_take_the_lane_while_the_steady_job_is_held(model):
    """Through the engine (its CUDA pipeline on the CPU: threaded, the lane beside the steady
    codec): A's first chunk goes out on the lane, its next chunk to the steady job, which is
    held; B's first chunk then goes out on the lane while it is still held. Each request's
    audio equals the model's own detokenizer fed the same pushes."""
    # Admission off: it is not what this tests, and its measured turn costs on a busy CPU
    # (the suite's other worker) can refuse the second request.
    config = EngineConfig(
        num_kv_blocks=64, max_num_seqs=4, first_audio_margin=0.0, realtime_admission=False
    )
    core = EngineCore(model, config, CPU, "sdpa")
    pushes, steady = held_lane_engine(model, core, CPU)
    audio: dict[str, list[np.ndarray]] = {}
    request_of: dict[int, str] = {}

    def add(request: SpeechRequest):
        r = core.add_request(request)
        request_of[id(core.worker.stream_state(r.request_id))] = r.request_id
        return r

    try:
        a = add(spec(model, 14, seed=1))
        run_until(core, lambda: a.first_audio_time is not None, audio)
        run_until(core, lambda: core.detok.steady_in_flight == 1, audio)
        b = add(spec(model, 10, seed=2))
        run_until(core, lambda: b.first_audio_time is not None, audio)
        assert core.detok.steady_in_flight == 1 and a.audio_chunks_out == 1
        steady.gate.set()
        run_until(core, lambda: not core.has_work(), audio)
    finally:
        steady.gate.set()
        core.close()

    on_lane = [(request_of[sid], len(toks)) for sid, toks, _, lane in pushes if lane]
    assert on_lane == [(a.request_id, 2), (b.request_id, 2)]
    for r in (a, b):
        mine = [(toks, fin) for sid, toks, fin, _ in pushes if request_of[sid] == r.request_id]
        assert sum(len(toks) for toks, _ in mine) == len(r.output_ids)
        state = model.stream_state_for(r.extras)
        expected = [model.detokenize([state], [toks], [fin])[0] for toks, fin in mine]
        np.testing.assert_allclose(
            np.concatenate(audio[r.request_id]), np.concatenate(expected), atol=ROUNDING, rtol=0
        )


@pytest.mark.parametrize("on", [True, False])
def test_the_lane_is_on_unless_the_user_turns_it_off(model, on):
    """`voxgate serve --model qwen3-tts-… [--no-first-chunk-lane]`: the option reaches the
    facts, and a threaded detokenizer has a lane of LANE_GRAPH_ROWS[-1] rows, or none."""
    kept = model.facts
    assert kept.first_chunk_lane  # a model loaded without the family's options has it on
    Qwen3TtsLoadOptions(first_chunk_lane=on).apply(model)
    detok = make_detokenizer(model, EngineConfig(), time.monotonic, CPU, threaded=True)
    try:
        assert detok.lane_room == (LANE_GRAPH_ROWS[-1] if on else 0)
    finally:
        detok.close()
        model.facts = kept
    assert dataclasses.replace(kept) == model.facts
