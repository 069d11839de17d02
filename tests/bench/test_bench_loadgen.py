"""The load generator against a scripted protocol server: what it records (frame arrivals,
pcm16 durations from byte counts, response.done, errors and close codes), and early stop."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from websockets.asyncio.server import serve

from voxbench.loadgen import ClientOptions, LoadGenerator
from voxbench.workload import PlannedRequest, WorkItem

PCM_FRAME = b"\x00\x00" * 480  # 20 ms of pcm16 at 24 kHz


async def scripted(ws) -> None:
    """session.start → session.started (pcm16 24 kHz) or a refusal; text → frames → done.
    The text says how: "ok", "late" (a 300 ms gap after 3 frames), "refuse", "hang" (2 s
    after 3 frames), "late_hang" (both)."""
    start = json.loads(await ws.recv())
    assert start["type"] == "session.start"
    # A server older than session.started's token_rate_hz: the bench must be told the rate.
    await ws.send(
        json.dumps(
            {
                "type": "session.started",
                "session_id": "s",
                "model": "fake",
                "output_audio": {"format": "pcm16", "sample_rate": 24000, "frame_ms": 20},
            }
        )
    )
    if "sampling" not in start:  # the bench's probe session: it ends at once
        assert json.loads(await ws.recv())["type"] == "session.end"
        await ws.close(1000)
        return
    assert start["sampling"]["min_tokens"] == start["sampling"]["max_tokens"]
    text_mode = json.loads(await ws.recv())["text"]
    if text_mode == "refuse":
        await ws.send(
            json.dumps({"type": "error", "code": "overloaded", "message": "busy", "fatal": True})
        )
        await ws.close(1013, "overloaded")
        return
    await ws.send(json.dumps({"type": "response.started", "response_id": "r"}))
    for i in range(10):
        if text_mode in ("late", "late_hang") and i == 3:
            await asyncio.sleep(0.3)
        if text_mode in ("hang", "late_hang") and i == 4:
            await asyncio.sleep(2.0)
        await ws.send(PCM_FRAME if i < 9 else PCM_FRAME[:480])  # the last frame: 10 ms
    await ws.send(
        json.dumps(
            {
                "type": "response.done",
                "response_id": "r",
                "status": "length",
                "audio_ms": 190,
                "ttfa_ms": 1,
            }
        )
    )
    await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def fake_url():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    async def main():
        async with serve(scripted, "127.0.0.1", 0) as server:
            holder["port"] = server.sockets[0].getsockname()[1]
            holder["stop"] = asyncio.Event()
            ready.set()
            await holder["stop"].wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    ready.wait(10)
    yield f"ws://127.0.0.1:{holder['port']}/v1/stream"
    loop.call_soon_threadsafe(holder["stop"].set)
    thread.join(5)


def plan_of(*modes: str, gap: float = 0.05) -> list[PlannedRequest]:
    return [
        PlannedRequest(i, WorkItem(f"w{i}", mode, 0.2), 16, 0.1 + i * gap)
        for i, mode in enumerate(modes)
    ]


def options(url: str, **kw) -> ClientOptions:
    return ClientOptions(
        url,
        {"format": "pcm16", "sample_rate": 24000, "frame_ms": 20},
        connect_ahead_s=0.1,
        drain_timeout_s=kw.pop("drain", 5.0),
        **kw,
    )


def test_records_frames_durations_and_failures(fake_url):
    with LoadGenerator() as gen:
        out = gen.run(plan_of("ok", "late", "refuse"), options(fake_url))
    ok, late, refused = out.records
    assert ok.ok and not ok.late and ok.done["status"] == "length"
    assert len(ok.arrivals_ms) == 10 and ok.frame_durations_ms() == [20.0] * 9 + [10.0]
    assert ok.received_audio_ms == 190.0 and ok.sent_s == pytest.approx(0.1, abs=0.05)
    assert 0 <= ok.ttfa_ms < 1000 and ok.arrivals_ms == sorted(ok.arrivals_ms)
    assert late.ok and late.late  # delivered, but a frame missed its deadline
    assert not refused.ok and refused.close_code == 1013
    assert refused.errors[0]["code"] == "overloaded" and refused.failure == "error_overloaded"
    assert not out.stopped_early and out.drain_timeouts == 0
    assert out.client["loop_lag_ms"]["n"] > 0


def test_drain_timeout_fails_what_is_still_running(fake_url):
    with LoadGenerator() as gen:
        out = gen.run(plan_of("ok", "hang"), options(fake_url, drain=1.0))
    assert out.records[0].ok
    assert out.records[1].failure == "drain_timeout" and out.drain_timeouts == 1


def test_early_stop_once_the_point_cannot_pass(fake_url):
    modes = ["late_hang"] + ["ok"] * 6
    with LoadGenerator() as gen:
        out = gen.run(
            plan_of(*modes, gap=0.4), options(fake_url, drain=20.0), stop_after_nonviable=0
        )
    assert out.stopped_early and out.wall_s < 2
    assert out.records[0].failure == "late_then_stopped"
    assert len(out.records) < len(modes)  # requests never sent are not part of the point
    assert all(r.sent_s is not None for r in out.records)


def test_worker_processes_share_the_plan(fake_url):
    with LoadGenerator(procs=2) as gen:
        out = gen.run(plan_of("ok", "ok", "ok", "refuse"), options(fake_url))
    assert [r.index for r in out.records] == [0, 1, 2, 3]
    assert [r.ok for r in out.records] == [True, True, True, False]
    assert out.client["procs"] == 2


def bench_argv(url: str, out, *extra: str) -> list[str]:
    return [
        "--log-level",
        "ERROR",
        "bench",
        "--url",
        url,
        "--rates",
        "2",
        "--bisect-steps",
        "0",
        "--duration",
        "0.5",
        "--min-requests",
        "2",
        "--max-audio-seconds",
        "0.4",
        "--warmup",
        "0",
        "--settle",
        "0",
        "--out",
        str(out),
        *extra,
    ]


def test_bench_needs_a_token_rate_from_the_server_or_the_user(fake_url, tmp_path, capsys):
    from gateway.cli import main

    # The fake server's session.started states no token_rate_hz: stop before any load, saying why.
    assert main(bench_argv(fake_url, tmp_path / "a")) == 2
    assert "pass --token-rate" in capsys.readouterr().err
    [path] = (tmp_path / "a").glob("*.json")
    assert json.loads(path.read_text())["systems"]["voxgate"]["points"] == []

    # Told the rate, the bench sizes every request with it.
    assert main(bench_argv(fake_url, tmp_path / "b", "--token-rate", "25")) == 0
    [path] = (tmp_path / "b").glob("*.json")
    data = json.loads(path.read_text())
    assert data["settings"]["token_rate"] == 25.0
    assert data["settings"]["token_rate_from"] == "--token-rate"
    [point] = data["systems"]["voxgate"]["points"]
    assert point["records"] and all(r["tokens"] == 10 for r in point["records"])  # 0.4 s × 25
