"""Per-request timelines (engine/request_trace.py): the summary's arithmetic on hand-made
timelines, and the engine on the CPU writing one line per finished or cancelled request whose
times are in order and whose chunks add up to what the listener got."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from engine.request_trace import (
    RequestTrace,
    TraceWriter,
    main,
    read_traces,
    read_turns,
    summarize,
)
from models.registry import load_model


def timeline(
    arrival: float, first_token: float, ready: float, chunks: list[tuple], step_s: float = 0.01
) -> dict:
    """chunks: (submitted, started, out, audio_s, buffered_s) in seconds after arrival; the
    request's tokens come at the engine's steps 3 and 103, `step_s` apart."""
    t = RequestTrace(arrival, prompt_tokens=10)
    t.token(arrival + first_token, 3)
    t.token(arrival + first_token + 100 * step_s, 103)  # only the first counts as first
    t.first_chunk_ready(arrival + ready)
    for submitted, started, out, audio_s, buffered_s in chunks:
        t.submitted(arrival + submitted, tokens=25, lane=submitted < 0.5, rows=4)
        t.out(arrival + out, arrival + started, audio_s, buffered_s)
    return json.loads(t.to_json("r"))


def test_summary_splits_time_to_first_audio_and_finds_gaps(tmp_path):
    a = timeline(100.0, 0.05, 0.20, [(0.30, 0.32, 0.36, 0.6, 0.0), (0.60, 0.70, 0.80, 1.0, 0.16)])
    b = timeline(
        101.0, 0.10, 0.25, [(0.25, 0.25, 0.30, 0.6, 0.0), (0.90, 1.00, 1.05, 1.0, -0.15)], 0.02
    )
    assert a["first_token_ms"] == 50.0 and a["chunks"][0]["started_ms"] == 320.0
    s = summarize([a, b])
    assert s["requests"] == 2 and s["chunks"] == 4
    assert s["empty_chunks"] == 0 and s["chunk_audio_ms"]["max"] == 1000.0
    empty = timeline(102.0, 0.05, 0.2, [(0.3, 0.3, 0.35, 0.6, 0.0), (0.5, 0.5, 0.55, 0.0, 0.4)])
    assert summarize([empty])["empty_chunks"] == 1  # the second job gave it no audio
    assert s["to_first_token"]["max"] == 100.0
    assert sorted([s["to_first_chunk_tokens"]["p50"], s["to_first_chunk_tokens"]["max"]]) == [
        150.0,
        150.0,
    ]
    assert s["held"]["max"] == 100.0  # a: ready at 200 ms, submitted at 300
    assert s["codec_wait"]["max"] == 20.0 and s["codec"]["max"] == 50.0
    assert s["first_audio"]["max"] == 360.0
    assert s["second_after_first"]["max"] == 750.0  # b: 1050 - 300
    assert s["second_codec_wait"]["max"] == 100.0
    assert s["gaps_ms"] == [150.0]  # b's second chunk came 150 ms after its listener ran dry
    assert s["lane_share"] == 0.5 and s["first_chunks_on_lane"] == 2
    assert (s["step_ms"]["p50"], s["step_ms"]["max"]) == (20.0, 20.0)  # b's 100 steps in 2 s
    assert sorted([s["step_ms"]["max"], summarize([a])["step_ms"]["max"]]) == [10.0, 20.0]

    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    for arrival in (5.0, 6.0, 7.0):
        writer.write(f"r{arrival}", RequestTrace(arrival, 3))
    writer.close()
    assert [t["arrival"] for t in read_traces(path, 5.5, 7.0)] == [6.0]


def test_the_command_line_summarises_a_file_and_refuses_a_wrong_one(tmp_path, capsys):
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    writer.write("r", RequestTrace(5.0, 3))
    writer.close()
    assert main([str(path), "--since", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 1
    bad = tmp_path / "not-a-trace.jsonl"
    bad.write_text("hello\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(bad)])
    assert exit_info.value.code == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-cosyvoice2")


def test_the_engine_writes_each_requests_timeline(model, tmp_path):
    path = tmp_path / "trace.jsonl"
    config = EngineConfig(
        num_kv_blocks=64, max_num_seqs=4, max_batch_tokens=64, trace_path=str(path)
    )
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=70, min_tokens=70)
    kept = core.add_request(SpeechRequest("Hello there, how are you?", None, params))
    dropped = core.add_request(SpeechRequest("Never mind.", None, params))
    audio: list[np.ndarray] = []
    for _ in range(5):
        core.step()
    core.cancel(dropped.request_id)
    while core.has_work():
        for event in core.step():
            if isinstance(event, AudioChunk) and event.request_id == kept.request_id:
                audio.append(event.pcm)
    core.close()

    lines = {t["request_id"]: t for t in read_traces(path)}
    assert set(lines) == {kept.request_id, dropped.request_id}
    assert lines[dropped.request_id]["status"] == "finished_cancelled"
    t = lines[kept.request_id]
    assert t["status"] == "finished_length" and t["tokens"] == 70
    assert t["arrival"] == kept.arrival_time and t["prompt_tokens"] == kept.num_prompt_tokens
    first = t["chunks"][0]
    assert 0 <= t["first_token_ms"] <= t["first_chunk_ready_ms"] <= first["submitted_ms"]
    for c in t["chunks"]:
        assert c["submitted_ms"] <= c["started_ms"] <= c["out_ms"] and not c["lane"]
    assert [c["out_ms"] for c in t["chunks"]] == sorted(c["out_ms"] for c in t["chunks"])
    assert sum(c["tokens"] for c in t["chunks"]) <= 70
    heard_ms = 1e3 * sum(len(pcm) for pcm in audio) / model.facts.sample_rate
    assert sum(c["audio_ms"] for c in t["chunks"]) == pytest.approx(heard_ms, abs=0.1)
    assert first["buffered_ms"] == 0.0  # nothing was playing before the first chunk
    # 70 tokens, one a step: the engine's LLM steps between the first and the last token.
    assert t["last_token_step"] - t["first_token_step"] == 69
    assert t["first_token_ms"] < t["last_token_ms"] <= t["chunks"][-1]["submitted_ms"]
    s = summarize(list(lines.values()))
    assert s["requests"] == 2 and s["first_audio"]["n"] == 1
    # The decode turns real-time admission measured, in order, at the rows that ran them.
    log = read_turns(path)
    assert log.model is None  # no warm-up ran: the model started from nothing
    assert len(log.turns) >= 50
    times = [t for t, _, _, _ in log.turns]
    assert times == sorted(times)
    assert all(1 <= rows <= 2 and seconds > 0 for _, rows, _, seconds in log.turns)


def test_a_refused_request_is_traced_with_its_cause_and_never_read_as_a_timeline(model, tmp_path):
    """A request the KV pool cannot hold is written as a refusal of its own (cause `kv`, no
    outlook: the pool, not the streams' outlook, refused it); read_traces leaves it out and
    read_refusals reads it."""
    from engine.api import EngineOverloaded
    from engine.request_trace import read_refusals

    path = tmp_path / "trace.jsonl"
    config = EngineConfig(num_kv_blocks=8, max_num_seqs=4, trace_path=str(path))
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(max_tokens=400)
    with pytest.raises(EngineOverloaded) as refused:
        core.add_request(SpeechRequest("Far too long for this pool.", None, params))
    kept = core.add_request(SpeechRequest("Hi.", None, SamplingParams(max_tokens=8)))
    while core.has_work():
        core.step()
    core.close()
    [refusal] = read_refusals(path)
    assert refusal["cause"] == "kv" and refusal["outlook"] is None
    assert refusal["reason"] == str(refused.value)
    assert [t["request_id"] for t in read_traces(path)] == [kept.request_id]
