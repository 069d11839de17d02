"""Output encoding in worker processes (`--encode-processes`): the same frames as on threads,
each encoder's calls in order beside others on the same worker, a dead worker an error (never
a hang), and a served session streaming through them."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets
from gateway_testkit import (
    collect_response,
    decode_opus,
    send,
    start_server,
    start_session,
)

from gateway.audio import make_off_loop_encoder
from gateway.codec_workers import CodecProcessFailed, CodecWorkers, _worker_main, in_need_order
from gateway.protocol import AudioFormat, AudioSpec
from tests.orphans import kill_left, spawned_children, wait_gone

ROOT = Path(__file__).resolve().parents[2]
RATE = 24000


def noise(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (0.1 * rng.standard_normal(int(RATE * seconds))).astype(np.float32)


async def frames_of(encoder, chunks: list[np.ndarray]) -> list[bytes]:
    out: list[bytes] = []
    for chunk in chunks:
        async for part in encoder.encode_parts(chunk):
            out += part
    return out + await encoder.flush()


@pytest.fixture(scope="module")
def workers():
    pool = CodecWorkers(2).start()
    yield pool
    pool.close()


@pytest.mark.parametrize("fmt", [AudioFormat.OPUS, AudioFormat.PCM16, AudioFormat.MULAW])
async def test_workers_give_the_threads_frames_in_order_for_interleaved_encoders(workers, fmt):
    spec = AudioSpec(format=fmt)
    timings: list[tuple[float, float]] = []
    # Three responses on two workers: two of them share one, their calls interleaved.
    pooled = [
        workers.open(spec, RATE, observe=lambda q, r, h: timings.append((q, r))) for _ in "abc"
    ]
    chunks = {i: [noise(0.64, 10 * i + k) for k in range(3)] for i in range(3)}
    got = await asyncio.gather(*(frames_of(enc, chunks[i]) for i, enc in enumerate(pooled)))
    for i in range(3):
        expected = await frames_of(make_off_loop_encoder(spec, RATE), chunks[i])
        assert got[i] == expected, i
    assert len(timings) == 3 * (3 * 2 + 1)  # each chunk a head and a rest, then the flush
    assert all(q >= 0 and r > 0 for q, r in timings)
    for enc in pooled:
        enc.close()


async def test_calls_made_together_travel_together_and_come_back_right():
    """An engine step hands every stream a frame at once: 64 encoders' calls made in one turn
    of the loop go to the one worker in a few messages, not 64, and each encoder still gets
    exactly the frames it would alone (its calls in order)."""
    pool = CodecWorkers(1).start()
    try:
        spec = AudioSpec(format=AudioFormat.OPUS)
        encoders = [pool.open(spec, RATE) for _ in range(64)]
        frames = [[noise(0.08, 100 * i + k) for k in range(3)] for i in range(64)]
        (worker,) = pool._workers
        before = worker.batches_sent
        got: list[list[bytes]] = [[] for _ in encoders]
        for k in range(3):  # three steps: every encoder's frame k in one turn
            outs = await asyncio.gather(*(e.encode(frames[i][k]) for i, e in enumerate(encoders)))
            for i, out in enumerate(outs):
                got[i] += out
        assert worker.batches_sent - before <= 3 * 16, worker.batches_sent - before
        for i in (0, 31, 63):
            alone = make_off_loop_encoder(spec, RATE)
            expected: list[bytes] = []
            for chunk in frames[i]:
                expected += await alone.encode(chunk)
            assert got[i] == expected, i
        for e in encoders:
            e.close()
    finally:
        pool.close()


def call(op: str, eid: int, seq: int, submitted: float, needed_by: float | None) -> tuple:
    return (op, eid, seq, None, submitted, needed_by)


def test_a_batch_runs_opens_then_calls_by_need_then_closes():
    """Of the calls that reach a worker together, the one whose listener needs its audio first
    runs first (a call without a need by when it was made); an encoder's calls keep their
    order even where a later one is needed sooner (its state follows them); opens run before
    every call, closes after."""
    batch = [
        call("encode", 1, 0, submitted=10.0, needed_by=13.0),
        ("open", 3, None, RATE, 32000, None),
        call("encode", 2, 1, submitted=10.0, needed_by=11.0),
        ("close", 4),
        call("encode", 3, 2, submitted=10.0, needed_by=12.0),
        call("flush", 2, 3, submitted=10.1, needed_by=None),  # its encode's need holds it back
        call("decode", 5, 4, submitted=10.5, needed_by=None),
        call("encode", 1, 5, submitted=10.2, needed_by=9.0),  # after encoder 1's first
    ]
    order = [m[0] if m[0] in ("open", "close") else m[2] for m in in_need_order(batch)]
    assert order == ["open", 4, 1, 3, 2, 0, 5, "close"]


def test_a_worker_encodes_a_batch_for_the_listener_that_needs_it_first():
    """A worker's process loop, fed one batch over its pipe: the encodes' replies come back in
    the order of their listeners' need, not the order they were made, each the bytes the
    encoder gives alone."""
    ours, theirs = multiprocessing.Pipe()
    worker = threading.Thread(target=_worker_main, args=(theirs,), daemon=True)
    worker.start()
    spec = AudioSpec(format=AudioFormat.OPUS)
    pcm = [noise(0.2, seed) for seed in range(3)]
    opens = [("open", eid, spec, RATE, 32000, None) for eid in range(3)]
    needs = [12.0, 10.0, 11.0]
    calls = [("encode", eid, eid, pcm[eid], 1.0, needs[eid]) for eid in range(3)]
    ours.send(opens + calls)
    replies = []
    while len(replies) < 3:
        assert ours.poll(10), "the worker did not answer"
        replies += ours.recv()
    ours.send([("stop",)])
    worker.join(10)
    assert [reply[1] for reply in replies] == [1, 2, 0]
    for status, seq, frames, _, _ in replies:
        assert status == "ok"
        assert frames == asyncio.run(make_off_loop_encoder(spec, RATE).encode(pcm[seq]))


async def test_a_worker_hurries_a_call_by_how_long_it_waited(workers):
    """The worker times each call from when the gateway made it (the message carries it):
    with a threshold of 0 every call runs hurried, with an hour's none; the same bytes as the
    thread path's encoder at that threshold, and the two thresholds' bytes differ."""
    chunks = [noise(0.32, seed) for seed in range(2)]
    got, flags = {}, []
    for hurry_after_s in (0.0, 3600.0):
        observe = lambda q, r, hurried: flags.append(hurried)  # noqa: E731
        pooled = workers.open(AudioSpec(), RATE, observe=observe, hurry_after_s=hurry_after_s)
        local = make_off_loop_encoder(AudioSpec(), RATE, hurry_after_s=hurry_after_s)
        got[hurry_after_s] = [p for chunk in chunks for p in await pooled.encode(chunk)]
        assert got[hurry_after_s] == [p for chunk in chunks for p in await local.encode(chunk)]
        pooled.close()
    assert got[0.0] != got[3600.0]
    assert flags == [True, True, False, False]  # the worker says which calls ran hurried


async def test_a_dead_worker_fails_its_calls_and_new_encoders_go_elsewhere():
    pool = CodecWorkers(2, restart_delay_s=600).start()  # no successor within this test
    try:
        first, second = pool.open(AudioSpec(), RATE), pool.open(AudioSpec(), RATE)
        assert await first.encode(noise(0.1, 1))  # both workers answer
        assert await second.encode(noise(0.1, 2))
        dead = pool._workers[0]
        dead.process.kill()
        with pytest.raises(CodecProcessFailed, match="exited"):
            await asyncio.wait_for(first.encode(noise(0.1, 3)), 10)
        # New encoders go to the worker still alive, and work.
        for _ in range(3):
            assert await pool.open(AudioSpec(), RATE).encode(noise(0.1, 4))
        pool._workers[1].process.kill()
        with pytest.raises(CodecProcessFailed, match="exited"):
            await asyncio.wait_for(second.encode(noise(0.1, 5)), 10)
        with pytest.raises(CodecProcessFailed, match="no output encoder process"):
            pool.open(AudioSpec(), RATE)
        assert pool.alive == 0 and pool.restarts == 0
    finally:
        pool.close()


async def test_a_successor_takes_a_dead_workers_place():
    pool = CodecWorkers(2, restart_delay_s=0.01).start()
    try:
        doomed = pool.open(AudioSpec(), RATE)
        assert await doomed.encode(noise(0.1, 1))
        pid = pool._workers[0].process.pid
        pool._workers[0].process.kill()
        with pytest.raises(CodecProcessFailed, match="exited"):
            await asyncio.wait_for(doomed.encode(noise(0.1, 2)), 10)
        for _ in range(600):  # the successor spawns and imports: seconds on a busy machine
            if pool.restarts == 1 and pool.alive == 2:
                break
            await asyncio.sleep(0.05)
        assert pool.restarts == 1 and pool.alive == 2
        assert pool._workers[0].process.pid != pid
        # Both slots take new encoders, and each gives the threads' frames.
        chunk = noise(0.64, 3)
        expected = await frames_of(make_off_loop_encoder(AudioSpec(), RATE), [chunk])
        for _ in range(2):
            assert await frames_of(pool.open(AudioSpec(), RATE), [chunk]) == expected
        processes = [w.process for w in pool._workers]
    finally:
        pool.close()
    assert not any(p.is_alive() for p in processes)  # close stops the successor too


# A gateway's process with two encoder processes, which stays until killed.
GATEWAY = """
import time

from gateway.codec_workers import CodecWorkers

if __name__ == "__main__":
    CodecWorkers(2).start()
    print("started", flush=True)
    time.sleep(600)
"""


def test_workers_end_with_a_killed_gateway(tmp_path):
    """SIGKILLed, the gateway's process runs no exit handler; its end of each worker's pipe
    closes with it, and the workers, reading it, end (no orphan keeps encoding)."""
    script = tmp_path / "gateway_process.py"
    script.write_text(GATEWAY)
    log = tmp_path / "out.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as out:
        gateway = subprocess.Popen(
            [sys.executable, str(script)], stdout=out, stderr=out, env=env, cwd=ROOT
        )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120  # two spawns and their imports on a busy machine
        while "started" not in log.read_text():
            assert gateway.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        workers = spawned_children(gateway.pid)
        assert len(workers) == 2, workers
        gateway.kill()
        gateway.wait(10)
        for pid in workers:
            assert wait_gone(pid, 20.0), f"an encoder process outlived the gateway: {pid}"
    finally:
        gateway.kill()
        gateway.wait(10)
        kill_left(workers)


def test_a_slot_that_keeps_dying_waits_longer_each_time():
    pool = CodecWorkers(1, restart_delay_s=1.0)  # not started: the back-off alone
    assert [pool._restart_delay(0) for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
    assert pool._restart_delay(1) == 1.0  # another slot has its own count
    assert max(pool._restart_delay(0) for _ in range(10)) == 60.0  # capped


async def test_a_session_streams_through_encoder_processes(engine):
    from dataclasses import replace

    from gateway.config import GatewaySettings

    settings = replace(GatewaySettings(model="tiny-orpheus"), encode_processes=1)
    before = set(multiprocessing.active_children())
    server = start_server(settings, engine)
    try:
        async with websockets.connect(server.url) as ws:
            await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 60})
            await send(ws, type="text", text="Encoded elsewhere, heard here.")
            played = await collect_response(ws)
        assert played.done["audio_ms"] == 20 * len(played.frames) > 0
        assert len(decode_opus(played.frames)) == 960 * len(played.frames)
        # It was the worker process that encoded them: kill it, and the next response fails
        # with an error event that says why, instead of hanging; the session stays usable,
        # and once the successor is up, responses play again.
        [worker] = set(multiprocessing.active_children()) - before
        worker.kill()
        worker.join(10)
        async with websockets.connect(server.url) as ws:
            await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 60})
            await send(ws, type="text", text="Nobody left to encode this.")
            failed = await collect_response(ws)
            assert failed.done["status"] == "failed" and not failed.frames
            [error] = [e for e in failed.events if e["type"] == "error"]
            assert error["code"] == "internal" and "encoder process" in error["message"]
            assert not error.get("fatal")
            for _ in range(60):  # the session goes on; the successor comes within seconds
                await send(ws, type="text", text="Still here?")
                again = await collect_response(ws)
                if again.done["status"] != "failed":
                    break
                await asyncio.sleep(0.5)
            assert again.done["status"] != "failed", again.done
            assert len(decode_opus(again.frames)) == 960 * len(again.frames) > 0
        metrics = httpx.get(server.http + "/metrics").text
        assert "voxgate_encoder_process_restarts_total 1.0" in metrics
        assert "voxgate_encoder_processes_alive 1.0" in metrics
    finally:
        server.stop()


def test_settings_refuse_a_negative_count():
    from gateway.config import GatewaySettings

    with pytest.raises(ValueError, match="encode_processes"):
        GatewaySettings(encode_processes=-1)
    with pytest.raises(ValueError, match="opus_hurry_ms"):
        GatewaySettings(opus_hurry_ms=-5)
    with pytest.raises(ValueError, match="at least 1"):
        CodecWorkers(0)


def test_processes_by_default_only_beside_a_cuda_engine(monkeypatch):
    import torch

    from gateway.codec_workers import gpu_default_encode_processes, process_count

    default = gpu_default_encode_processes()
    assert process_count(None, "cuda") == process_count(None, "cuda:1") == default
    assert process_count(None, "cpu") == 0
    assert process_count(0, "cuda") == 0 and process_count(2, "cpu") == 2  # asked: as asked
    # No --device: the engine takes CUDA when a GPU is visible, and so do the encoders.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert process_count(None, None) == default
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert process_count(None, None) == 0


def test_the_gpu_default_grows_with_the_host_within_bounds(monkeypatch):
    """Half the usable cores, never fewer than 4 (a 2-core VM beside a GPU) nor more than 16
    (a 128-core host), and the affinity's cores, not the machine's, are the ones counted."""
    from gateway import codec_workers
    from gateway.codec_workers import gpu_default_encode_processes

    assert [gpu_default_encode_processes(n) for n in (1, 2, 8, 9, 16, 24, 32, 128)] == [
        4, 4, 4, 4, 8, 12, 16, 16,
    ]  # fmt: skip
    monkeypatch.setattr(codec_workers.os, "sched_getaffinity", lambda pid: set(range(20)))
    assert gpu_default_encode_processes() == 10
    assert codec_workers.process_count(None, "cuda") == 10


def test_the_gateway_gives_its_sessions_encoders_its_hurry_threshold():
    """--opus-hurry-ms reaches the encoders sessions open (0: they never hurry)."""
    from gateway.app import Gateway
    from gateway.config import GatewaySettings

    for hurry_ms, expected in ((35.0, 0.035), (0.0, None)):
        gateway = Gateway(GatewaySettings(opus_hurry_ms=hurry_ms, encode_processes=0), None)
        encoder = gateway.open_encoder(AudioSpec(), RATE)
        assert encoder.encoder.hurry_after_s == expected
