"""The cached estimator with its context in a fixed pool (models/codecs/flow_hift/cache_pool.py,
`FlowHiftDetokenizer(..., estimator_cache=True, cache_slots=N)`): the same mel and audio as the
eager cached path (PassCaches grown by concatenation), with voice prompts, a short first hop,
part-chunks and more streams than slots; slots come back when streams are dropped; with
graphs, every job replays the pool's and the conditioning's graphs."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from tests.models.test_cached_flow import cached, flow_state
from tests.models.test_flow_hift import (
    EagerGraphs,
    assert_batch_equals_singles,
    codes,
    stream_for,
    streamed,
)
from tests.models.test_flow_hift import (
    detok as detok,  # noqa: F401 - the module's fixture: tiny flow + HiFT, seeded
)


@pytest.mark.parametrize("first_hop", [None, 7])
@pytest.mark.parametrize("prompt_chunks", [0, 1, 4])
def test_pooled_context_equals_the_eager_cache(detok, first_hop, prompt_chunks):  # noqa: F811
    # 4 prompt chunks exceed the pool's prompt room (3 chunks): that stream stays eager.
    tokens = codes(21, 130)
    pushes = [10, 20, 25, 13, 30]  # part-chunks, several chunks at once, a final flush
    eager = flow_state(cached(detok, first_hop=first_hop), 22, prompt_chunks, tokens, pushes)
    pooled_detok = cached(detok, first_hop=first_hop, cache_slots=2)
    pooled = flow_state(pooled_detok, 22, prompt_chunks, tokens, pushes)
    assert (pooled.pool_slot is None) == (prompt_chunks > pooled_detok.GRAPH_PROMPT_CHUNKS)
    assert (pooled.flow_cache is None) == (pooled.pool_slot is not None)
    assert pooled.mel.shape == eager.mel.shape == (80, 2 * 130)
    torch.testing.assert_close(pooled.mel, eager.mel, atol=1e-5, rtol=1e-5)


def test_more_streams_than_slots_mix_pooled_and_eager_rows(detok):  # noqa: F811
    d = cached(detok, first_hop=7, cache_slots=2)
    # Batched, the first two streams take the slots and the third runs eagerly beside them;
    # each equals itself streamed alone (whichever path it then gets).
    assert_batch_equals_singles(
        d, [(31, 1, 90, [10, 40]), (32, 0, 70, [10, 25, 20]), (33, 1, 60, [30, 5])]
    )


def test_slots_come_back_when_streams_are_dropped(detok):  # noqa: F811
    d = cached(detok, cache_slots=2)
    pool = d.cache_pool
    a, b, c = (stream_for(d, s, 0) for s in (41, 42, 43))
    for s in (a, b, c):
        d.push(s, codes(44, 28))
    d._flow_step([a, b, c], [False] * 3)
    assert pool.free_slots == 0 and a.pool_slot and b.pool_slot and c.pool_slot is None
    index = a.pool_slot.index
    del a
    gc.collect()
    assert pool.free_slots == 1
    d2 = stream_for(d, 45, 0)
    d.push(d2, codes(46, 28))
    d._flow_step([d2], [False])
    assert d2.pool_slot.index == index  # reused, cleared: equal to a fresh eager stream
    fresh = stream_for(cached(detok), 45, 0)
    fresh_detok = cached(detok)
    fresh_detok.push(fresh, codes(46, 28))
    fresh_detok._flow_step([fresh], [False])
    torch.testing.assert_close(d2.mel, fresh.mel, atol=1e-5, rtol=1e-5)


def test_graphed_jobs_replay_the_pool_and_conditioning_graphs(detok):  # noqa: F811
    d = cached(detok, first_hop=7, cache_slots=4)
    graphs = EagerGraphs()
    d.enable_cuda_graphs(graphs)
    assert ("pool", 1) in graphs and ("pool", 64) in graphs
    assert ("cond", 4, 2 * (25 + 7)) in graphs and not any(k[0] == "flow" for k in graphs.keys)
    setups = [(51, 1, 70, [10, 25, 25]), (52, 0, 60, [10, 25, 10]), (53, 1, 45, [10, 25, 5])]
    plain = cached(detok, first_hop=7)
    expected = [
        streamed(plain, stream_for(plain, s, p), codes(s, n), pushes) for s, p, n, pushes in setups
    ]
    got = [streamed(d, stream_for(d, s, p), codes(s, n), pushes) for s, p, n, pushes in setups]
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)
    stages = {key[0] for key in graphs.shapes}
    assert {"pool", "cond", "hift"} <= stages
    assert not d.eager_calls  # every call of every job found its graph


def test_the_engine_streams_the_same_audio_whether_a_stream_has_a_slot_or_not():
    """tiny-cosyvoice2 through the engine (CPU, first-chunk lane on its own thread): with 3
    slots every request's context is pooled, with 1 two of three run the eager cache; the
    tokens and the audio are the same, and every slot is back once the requests are done."""
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.detok_threads import ThreadedDetokenizer
    from engine.outputs import SpeechRequest
    from engine.request import SamplingParams
    from models.registry import CosyVoiceOptions, load_model
    from tests.models.test_cosyvoice2_lane import run_until

    cpu = torch.device("cpu")
    texts = ["Hello there.", "A second voice.", "And a third one, longer than the rest."]
    results = []
    for slots in (3, 1):
        model = load_model("tiny-cosyvoice2", cosyvoice=CosyVoiceOptions(flow_cache_slots=slots))
        config = EngineConfig(num_kv_blocks=64, max_num_seqs=4, max_batch_tokens=64)
        core = EngineCore(model, config, cpu, "sdpa")
        core.detok = ThreadedDetokenizer(model, core.clock, cpu, model.first_chunk_lane_codec())
        audio: dict[str, list[np.ndarray]] = {}
        try:
            requests = [
                core.add_request(
                    SpeechRequest(t, None, SamplingParams(seed=k, max_tokens=70, min_tokens=70))
                )
                for k, t in enumerate(texts)
            ]
            run_until(core, lambda c=core: not c.has_work(), audio)
        finally:
            core.close()
        results.append([(r.output_ids, np.concatenate(audio[r.request_id])) for r in requests])
        del requests, audio
        gc.collect()
        assert model.detok.cache_pool.free_slots == slots
    for (tokens_a, pcm_a), (tokens_b, pcm_b) in zip(*results, strict=True):
        assert tokens_a == tokens_b and len(pcm_a) == len(pcm_b) > 0
        # Which streams share a job depends on thread timing, and batch composition moves
        # float32 sums by ~1e-5; a wrong context would move the audio by its own scale (~3e-2).
        np.testing.assert_allclose(pcm_b, pcm_a, atol=1e-4)


def test_a_stream_decoded_after_its_last_chunk_is_refused(detok):  # noqa: F811
    # Its slot went back to the pool at its last chunk and may be another stream's now.
    d = cached(detok, cache_slots=1)
    s = stream_for(d, 61, 0)
    d.push(s, codes(62, 30))
    d.decode([s], [True])
    assert s.pool_slot.released and d.cache_pool.free_slots == 1
    d.push(s, codes(63, 25))
    with pytest.raises(RuntimeError, match="after its last chunk"):
        d.decode([s], [True])
