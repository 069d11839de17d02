"""Async scheduling (launch step n+1 before step n's tokens reach the host) changes nothing a
listener can observe: the same tokens, the same audio and the same finish reasons as the
synchronous step, with stops mid-stream (seen one step late) and cancels of requests whose
token is still in flight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelFacts
from models.orpheus.loading import load_orpheus
from tests.cpu_graphs import count_graphed_steps, with_cpu_graphs

TEXTS = [
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "Hi!",
    "Streaming audio should start quickly and never stall.",
    "One, two, three.",
    "Okay.",
]
STOP_BONUS = 1e4  # added to the stop column wherever the model allows a stop


@pytest.fixture(scope="module")
def stopping_model(tiny_orpheus_dirs):
    """Tiny Orpheus whose stop token wins wherever the position rule allows it (a frame
    boundary once min_tokens is reached), so each request stops at a point its min_tokens
    chooses, mid-stream, in greedy and seeded sampling alike."""
    model_dir, codec_dir = tiny_orpheus_dirs
    model = load_orpheus(str(model_dir), str(codec_dir), torch.device("cpu"), torch.float32)
    plain = model.device_candidates  # what the eager head and the sampling graph both call

    def stop_likely(hidden, allow_stop, steps):
        cands = plain(hidden, allow_stop, steps)
        cands.logits[:, -1] += STOP_BONUS  # the stop column; -inf (not allowed) stays -inf
        return cands

    model.device_candidates = stop_likely
    return model


# (text, min_tokens, max_tokens, temperature): stops at output 7, 14 and 21, and two that run to
# max_tokens (one of them exactly at a frame boundary, where a stop would be allowed next).
MIX = [
    (TEXTS[0], 7, 40, 0.0),
    (TEXTS[1], 30, 30, 0.8),
    (TEXTS[2], 14, 40, 0.8),
    (TEXTS[3], 21, 40, 0.0),
    (TEXTS[4], 28, 28, 0.0),
    (TEXTS[5], 10, 40, 0.8),
]


def specs() -> list[SpeechRequest]:
    return [
        SpeechRequest(
            text,
            sampling=SamplingParams(
                temperature=temp,
                top_p=0.9,
                repetition_penalty=1.3,
                seed=i,
                max_tokens=hi,
                min_tokens=lo,
            ),
            request_id=f"r{i}",
        )
        for i, (text, lo, hi, temp) in enumerate(MIX)
    ]


def new_core(model, async_scheduling: bool) -> EngineCore:
    # A small batch and token budget: queueing, chunked prefill mixed with in-flight decodes.
    config = EngineConfig(
        max_num_seqs=4,
        max_batch_tokens=40,
        num_kv_blocks=128,
        policy="fcfs",
        async_scheduling=async_scheduling,
    )
    return EngineCore(model, config, torch.device("cpu"), "sdpa", clock=lambda: 0.0)


def run(core: EngineCore, join_every: int = 2):
    """Staggered arrivals; returns {id: (tokens, audio, finish reason, finish count)}."""
    pending, requests = specs(), {}
    audio: dict[str, list[np.ndarray]] = {}
    finished: dict[str, Finished] = {}
    step, saw_in_flight = 0, False
    while pending or core.has_work():
        if pending and step % join_every == 0:
            request = core.add_request(pending.pop(0))
            requests[request.request_id] = request
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, Finished):
                finished[event.request_id] = event
        saw_in_flight |= any(r.num_inflight for r in requests.values())
        step += 1
    assert core.blocks.num_used == 0 and core.scheduler.reserved_blocks == 0
    assert saw_in_flight == core.async_scheduling
    return {
        rid: (
            r.output_ids,
            np.concatenate(audio.get(rid, [np.zeros(0, np.float32)])),
            finished[rid].reason,
            finished[rid].num_tokens,
        )
        for rid, r in requests.items()
    }


def test_async_equals_sync_with_stops_mid_stream(stopping_model):
    sync_core = new_core(stopping_model, async_scheduling=False)
    async_core = new_core(stopping_model, async_scheduling=True)
    assert not sync_core.async_scheduling and async_core.async_scheduling
    sync, overlapped = run(sync_core), run(async_core)
    stops = {rid for rid, (_, _, reason, _) in sync.items() if reason == FinishReason.STOP}
    assert stops == {"r0", "r2", "r3", "r5"}  # the mix really stops mid-stream
    assert [len(sync[r][0]) for r in ("r0", "r2", "r3", "r5")] == [8, 15, 22, 15]
    for rid, (tokens, pcm, reason, count) in sync.items():
        a_tokens, a_pcm, a_reason, a_count = overlapped[rid]
        assert a_tokens == tokens, rid
        assert (a_reason, a_count) == (reason, count) == (reason, len(tokens)), rid
        assert len(pcm) > 0 and a_pcm.shape == pcm.shape, rid
        np.testing.assert_allclose(a_pcm, pcm, atol=1e-5, err_msg=rid)


def test_cancel_with_a_token_in_flight(stopping_model):
    """Cancel a request right after a step launched its token; reuse its id at once. The
    in-flight token is dropped, its pages come back, and everyone else is unaffected."""
    reference = run(new_core(stopping_model, async_scheduling=False))
    core = new_core(stopping_model, async_scheduling=True)
    keep, drop = specs()[1], specs()[3]
    kept = core.add_request(keep)
    dropped = core.add_request(drop)
    while dropped.num_inflight == 0 or len(dropped.output_ids) < 3:
        core.step()
    before = list(dropped.output_ids)
    used = core.blocks.num_used
    events = core.cancel(dropped.request_id)
    assert [(e.reason, e.num_tokens) for e in events] == [(FinishReason.CANCELLED, len(before))]
    assert core.blocks.num_used < used
    again = core.add_request(drop)  # the same id while the old token is still in flight
    while core.has_work():
        core.step()
    assert dropped.output_ids == before  # the in-flight token was discarded
    assert dropped.num_inflight == 0 and again.num_inflight == 0
    assert kept.output_ids == reference[keep.request_id][0]
    assert again.output_ids == reference[drop.request_id][0]
    assert core.blocks.num_used == 0


def test_only_single_id_models_without_host_sampling_state_overlap():
    """One id per step, no depth stage, no full-duplex session: repetition-aware sampling
    (CosyVoice 2) overlaps too, its window being a ring on the device."""
    base = dict(
        name="m",
        sample_rate=24000,
        token_rate_hz=80.0,
        stop_token_ids=(0,),
        first_chunk_tokens=8,
        chunk_tokens=8,
    )
    from models.base import RepetitionAwareSampling

    assert ModelFacts(**base).supports_async_scheduling
    assert not ModelFacts(**base, row_width=9).supports_async_scheduling  # depth stage
    assert ModelFacts(**base, repetition_aware=RepetitionAwareSampling()).supports_async_scheduling
    assert not ModelFacts(**base, full_duplex=True).supports_async_scheduling


def test_arrivals_beside_decodes_from_graphs_change_nothing(stopping_model):
    """Steps of decodes and fresh prompts run from the decode, prompt and sampling graphs
    (Worker._launch_graphed): the same tokens, audio and finishes as eager forwards, with
    chunked prompts (whose later chunks stay eager), stops mid-stream and tokens in flight."""
    reference = run(new_core(stopping_model, async_scheduling=True))
    core = new_core(stopping_model, async_scheduling=True)
    with_cpu_graphs(core.worker)
    graphed = count_graphed_steps(core.worker)
    result = run(core)
    assert len(graphed) >= 3 and max(graphed) > 1  # arrivals beside decodes, from graphs
    assert core.audio.totals.prefill_graphed == len(graphed)  # what /metrics reports
    for rid, (tokens, pcm, reason, count) in reference.items():
        g_tokens, g_pcm, g_reason, g_count = result[rid]
        assert g_tokens == tokens, rid
        assert (g_reason, g_count) == (reason, count), rid
        np.testing.assert_allclose(g_pcm, pcm, atol=1e-5, err_msg=rid)
