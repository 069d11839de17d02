"""CosyVoice 2's first-chunk detokenizer lane on the GPU: the lane's own graphs (rows 1, 2, 4, 8;
larger jobs split into several replays) replay as eager, and through the engine — lane and
steady graphs from two pools replayed on two threads and streams at once — every request's
audio equals an eager decode of the same pushes.

    pytest tests/gpu -k lane

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.detok_threads import ThreadedDetokenizer
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.codecs.flow_hift.lane import FlowHiftLane
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2 import configs
from models.cosyvoice2.family import CosyVoiceLoadOptions
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from tests.gpu.graph_compare import ComparedGraphs, random_streams
from tests.models.lane_codecs import LoggedCodec, assert_audio_is_eager_decode_of_pushes

# Graphs against eager in IEEE float32 (ieee_float32): captured at padded shapes they may pick
# other kernels, whose TF32 rounding would differ (served, the flow runs in TF32).
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("ieee_float32")]
CUDA = torch.device("cuda")


@pytest.mark.parametrize("first_hop", [7, 20])
def test_lane_graphs_replay_as_eager_for_every_lane_bucket(parts, first_hop):
    flow, hift, chunk_size = parts
    steady = FlowHiftDetokenizer(flow, hift, chunk_size, first_hop=first_hop)
    lane = steady.twin(FlowHiftLane.GRAPH_ROWS)
    graphs = ComparedGraphs(CUDA)
    lane.enable_cuda_graphs(graphs)
    g = torch.Generator().manual_seed(3)
    # First chunks of 1..11 requests (11: split into 8 + 3 rows), one flow chunk each or two
    # (the cover rule's next grid point).
    for n in (1, 2, 3, 5, 8, 11):
        for tokens in (first_hop + 3, first_hop + chunk_size + 3):
            states = random_streams(lane, n, g)
            for s in states:
                lane.push(s, torch.randint(0, 6561, (tokens,), generator=g).tolist())
            lane.decode(states, [False] * n)
    assert {key[0] for key, *_ in graphs.compared} == {"prep", "euler", "hift"}
    assert {key[1] for key, *_ in graphs.compared} == set(FlowHiftLane.GRAPH_ROWS)
    assert not [k for k in lane.eager_calls if k[0] == "flow"], lane.eager_calls
    for key, replayed, eager in graphs.compared:
        torch.testing.assert_close(
            replayed, eager, atol=1e-4, rtol=1e-4, msg=lambda m, k=key: f"{k}: {m}"
        )


def spec(i: int, n: int) -> SpeechRequest:
    text = ["Hello there.", "The quick brown fox.", "Hi!", "One, two, three."][i % 4]
    return SpeechRequest(text, None, SamplingParams(seed=i, max_tokens=n, min_tokens=n))


def run_staggered(core: EngineCore, lengths: list[int], every: int = 6):
    """Requests arriving every `every` steps, so that first chunks become ready while steady
    jobs run. Returns the requests and their audio."""
    requests, audio, step = [], {}, 0
    while len(requests) < len(lengths) or core.has_work():
        if step % every == 0 and len(requests) < len(lengths):
            requests.append(core.add_request(spec(len(requests), lengths[len(requests)])))
            audio[requests[-1].request_id] = []
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio[event.request_id].append(event.pcm)
        step += 1
    return requests, audio


@pytest.mark.parametrize("urgent", [False, True])
def test_engine_lane_audio_equals_eager_decode_of_the_same_pushes(tmp_path, urgent):
    """urgent: every playing request's ready chunk counts as about to be late, so the lane
    takes chunks of streams the steady job began (and hands them back) whenever it is free."""
    folder = tmp_path / "model"
    write_cosyvoice2_checkpoint(folder, configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025)
    model = load_cosyvoice2(str(folder), CUDA, torch.float32, name="tiny-cosyvoice2")
    # Steady jobs of any size (--steady-batch-rows 0): the lane's hand-overs are the test.
    model = CosyVoiceLoadOptions(steady_batch_rows=0).apply(model)
    config = dataclasses.replace(
        EngineConfig(max_num_seqs=8, max_batch_tokens=256, num_kv_blocks=256),
        first_audio_margin=0.0,
        realtime_admission=False,  # the test's arrivals, whatever the measured costs
    )
    lengths = [90, 60, 75, 40, 85, 50, 70, 65]
    core = EngineCore(model, config, CUDA, "sdpa")
    assert core.on_llm_stream.priority < 0  # the LLM's steps ran on a high-priority stream
    if urgent:
        core.scheduler.lane_urgent = lambda request, now: True
    lane = core.detok.lane  # captured by the engine with a CallableGraphs (pool) of its own
    assert isinstance(lane, FlowHiftLane) and lane.detok.graphs is not None
    core.detok.close()
    pushes: list[tuple] = []
    core.detok = ThreadedDetokenizer(
        LoggedCodec(model, pushes, lane=False), core.clock, CUDA, LoggedCodec(lane, pushes, True)
    )
    state_ids: dict[str, int] = {}
    original_add = core.add_request

    def add(s):
        r = original_add(s)
        state_ids[r.request_id] = id(core.worker.stream_state(r.request_id))
        return r

    core.add_request = add
    try:
        requests, audio = run_staggered(core, lengths)
    finally:
        core.close()
    assert core.lane_jobs >= 1
    assert_audio_is_eager_decode_of_pushes(model, requests, state_ids, pushes, audio, urgent)
