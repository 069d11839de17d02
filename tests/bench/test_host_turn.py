"""bench/host_turn.py: the engine's host time with the device's work stood in for. The
stand-ins must leave the engine serving as it does: every request of a burst runs to its
length and its audio comes out whole, only silent and at no compute's cost."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from host_turn import host_engine  # noqa: E402

from engine.outputs import AudioChunk, Finished, FinishReason  # noqa: E402
from voxbench.throughput import speech_request  # noqa: E402
from voxbench.workload import PlannedRequest, WorkItem  # noqa: E402


def test_stood_in_requests_run_to_their_length_with_all_their_audio():
    args = argparse.Namespace(model="tiny-orpheus", server_arg=["--max-num-seqs=8"])
    core, model = host_engine(args)
    try:
        tokens = [70, 98, 133]  # 10, 14 and 19 frames
        ids = []
        for i, n in enumerate(tokens):
            item = WorkItem(f"w{i}", "Hello there, how are you?", n / model.facts.token_rate_hz)
            request = core.add_request(speech_request(model, PlannedRequest(i, item, n, 0.0)))
            ids.append(request.request_id)
        samples, finished = dict.fromkeys(ids, 0), {}
        while core.has_work():
            for event in core.step():
                if isinstance(event, AudioChunk):
                    assert not event.pcm.any()  # the stood-in codec's silence
                    samples[event.request_id] += len(event.pcm)
                elif isinstance(event, Finished):
                    finished[event.request_id] = event
        frame = model.detok.samples_per_frame
        for request_id, n in zip(ids, tokens, strict=True):
            assert finished[request_id].reason is FinishReason.LENGTH
            assert samples[request_id] == n // 7 * frame  # every frame's audio, once
    finally:
        core.close()


def test_the_model_familys_options_among_the_server_args_reach_the_model():
    """engine_load's engine (host_turn builds it) loads the model as `voxgate serve` does: a
    family option among the server args (--snac-large-chunk-frames) is the model's, not
    parsed and dropped (a bench of --no-snac-fp16 would otherwise measure the default)."""
    args = argparse.Namespace(
        model="tiny-orpheus", server_arg=["--max-num-seqs=8", "--snac-large-chunk-frames=16"]
    )
    core, model = host_engine(args)
    try:
        assert model.detok.plan.large_chunk_frames == 16
        assert model.facts.large_chunk_tokens == 16 * 7
    finally:
        core.close()
