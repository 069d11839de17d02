"""`voxgate bench --serve --baseline` end to end on CPU: real `voxgate serve` and baseline server
subprocesses with tiny-orpheus, two rate points of four short requests, the engine's throughput.

The SLO is relaxed so that both rate points run whatever this machine's speed (the tiny model
on a shared CPU is not expected to stream in real time); the figures must still be sane."""

from __future__ import annotations

import json

import pytest

from gateway.cli import main
from voxbench.workload import tokens_for


@pytest.mark.timeout(300)
def test_bench_end_to_end(tmp_path, tiny_orpheus_dirs, capsys, served_bench):
    argv = [
        "--log-level",
        "WARNING",
        "bench",
        "--serve",
        "--baseline",
        "--model",
        "tiny-orpheus",
        "--device",
        "cpu",
        "--rates",
        "2,4",
        "--baseline-rates",
        "2",
        "--bisect-steps",
        "0",
        "--duration",
        "1",
        "--min-requests",
        "4",
        "--max-audio-seconds",
        # The baseline's reference scheme emits nothing for fewer than 28 tokens, and a text
        # that splits into sentences shares its budget among them: 1 s (82 tokens) keeps every
        # request audible on both systems.
        "1.0",
        "--slo-ttfa-ms",
        "60000",
        "--slo-viability",
        "0",
        "--throughput",
        "2",
        "--baseline-throughput",
        "0",  # its RTF is measured in test_bench_baseline (transformers loads are slow here)
        "--baseline-min-requests",
        "2",
        "--warmup",
        "1",
        "--settle",
        "0.2",
        "--out",
        str(tmp_path),
        # The pipeline end to end, not capacity: a shared CI core does not carry even one
        # tiny-orpheus stream in real time, and admission would refuse the rest.
        "--server-arg=--no-realtime-admission",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "results:" in out and "goodput:" in out

    [path] = tmp_path.glob("*.json")
    assert path.name.endswith("-tiny-orpheus.json")
    assert path.with_suffix(".png").stat().st_size > 10_000
    data = json.loads(path.read_text())
    for key in (
        "model",
        "machine",
        "commit",
        "goodput_req_s",
        "baseline_goodput_req_s",
        "ttfa_ms",
        "viability",
        "rtf",
        "baseline_rtf",
        "settings",
        "systems",
        "deviations",
    ):
        assert key in data, key
    assert data["model"] == "tiny-orpheus" and data["machine"]
    settings = data["settings"]
    assert settings["duration_s"] == 1 and settings["min_requests"] == 4
    assert settings["output_audio"] == {"format": "opus", "sample_rate": 48000, "frame_ms": 20}
    # The served model's own rate (both servers state it in session.started): tiny-orpheus's.
    assert settings["token_rate"] == 7 * 24000 / 2048 and settings["token_rate_from"] == "server"

    system = data["systems"]["voxgate-slack"]
    assert [p["rate"] for p in system["points"]] == [2.0, 4.0]
    assert data["goodput_req_s"] == 4.0  # both pass under the relaxed SLO
    assert data["rtf"] > 0 and system["throughput"]["requests"] == 2
    burst = system["throughput"]["engine_loop"]  # where the engine's time went in the burst
    assert burst["llm_steps_per_s"] > 0 and burst["audio_x_realtime"] > 0
    for point in system["points"]:
        s = point["summary"]
        assert s["requests"] == 4 == len(point["records"]) and s["ok"] == 4
        ttfa = s["ttfa_ms"]
        assert 0 < ttfa["p50"] <= ttfa["p90"] <= ttfa["p99"] < 20_000
        assert 0.0 <= s["viability"] <= 1.0
        assert s["audio_s_received"] >= 0.8 * s["audio_s_requested"]
        for rec in point["records"]:
            assert rec["done"]["status"] == "length" and rec["frame_ms"] == 20
            assert rec["tokens"] == tokens_for(rec["audio_seconds"], settings["token_rate"])
            assert rec["arrivals_ms"] == sorted(rec["arrivals_ms"])
        # The engine's side of the same requests (its traces, this point's arrivals only; a
        # text of two sentences is two engine requests): first audio before the client's.
        engine = point["engine_trace"]
        assert engine["requests"] >= 4 and engine["first_audio"]["n"] == engine["requests"]
        assert engine["first_audio"]["p50"] <= ttfa["p99"]
        assert engine["to_first_token"]["max"] <= engine["first_audio"]["max"]
        # The server's full garbage collections, event-loop lag and encodes during the point,
        # from its /metrics (the lag probe wakes every 50 ms: the point and its drain take > 1 s).
        pauses = point["server_pauses"]
        assert set(pauses) == {
            "full_gc",
            "loop_lag",
            "encode_queue",
            "encode_run",
            "encode_hurried",
            "audio_delivery",
        }
        assert pauses["encode_run"]["count"] >= 4 and pauses["encode_run"]["ms"] > 0
        # Every chunk of an engine on this host is timed from the engine to the socket, and
        # each chunk is at least one encode.
        delivered = pauses["audio_delivery"]
        assert 4 <= delivered["count"] <= pauses["encode_run"]["count"] and delivered["ms"] > 0
        for p in pauses.values():
            assert set(p) == {"count", "over_20ms", "over_100ms", "ms"}
            assert 0 <= p["over_100ms"] <= p["over_20ms"] <= p["count"] and p["ms"] >= 0
        assert pauses["loop_lag"]["count"] >= 10
    assert set(data["ttfa_ms"]) == {"p50", "p90", "p99"} and data["ttfa_ms"]["p90"] > 0

    baseline = data["systems"]["hf-baseline"]
    assert baseline["points"] and "throughput" not in baseline
    assert "engine_trace" not in baseline["points"][0]  # not a Voxgate engine
    assert baseline["points"][0]["server_pauses"]["loop_lag"]["count"] > 0  # its /metrics too
    assert len(baseline["points"][0]["records"]) >= 2
    assert all(r["ok"] for r in baseline["points"][0]["records"])
    assert data["baseline_rtf"] is None and data["baseline_goodput_req_s"] == 2.0
    assert any("max(1 s, 4 requests)" in d for d in data["deviations"])
