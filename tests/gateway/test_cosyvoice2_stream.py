"""A `/v1/stream` TTS session with tiny-cosyvoice2 (Qwen2 LM, flow + HiFT audio): real uvicorn,
real engine, the `websockets` client; the session's audio equals the engine's own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import websockets
from gateway_testkit import collect_response, send, start_session

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams

TEXT = "Hello from the gateway."
SAMPLING = {"temperature": 0.0, "max_tokens": 30, "min_tokens": 30}  # 1.2 s: one chunk + flush
PCM24 = {"format": "pcm16", "sample_rate": 24000}


@pytest.fixture(scope="module")
def cv_engine():
    from engine.config import EngineConfig
    from engine.factory import build_engine

    # First chunks of exactly the first hop (no cover margin): the two requests compared below
    # are then cut into the same chunks however busy the machine is, and HiFT's windows, which
    # meet at the chunks' seams, make the same samples (a slow step had grown one request's
    # first chunk and moved a seam: 0.026 apart there).
    config = EngineConfig(kv_cache_mb=64, realtime_admission=False, first_audio_margin=0.0)
    eng = build_engine("tiny-cosyvoice2", config=config)
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="module")
def cv_server(cv_engine):
    from gateway_testkit import start_server

    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-cosyvoice2"), cv_engine)
    yield server
    server.stop()


async def test_cosyvoice2_session_streams_the_engine_audio(cv_server, cv_engine):
    async with websockets.connect(cv_server.url) as ws:
        started = await start_session(ws, sampling=SAMPLING, output_audio=PCM24, voice="guide")
        await send(ws, type="text", text=TEXT)
        played = await collect_response(ws)
    assert started["model"] == "tiny-cosyvoice2"
    assert started["token_rate_hz"] == cv_engine.facts.token_rate_hz == 25  # not Orpheus's 82
    assert played.done["status"] == "length"
    assert played.done["audio_ms"] == 1200  # 30 tokens x 2 mel frames x 20 ms
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    params = SamplingParams(**{**cv_engine.facts.sampling_defaults, **SAMPLING})
    stream = await cv_engine.submit(SpeechRequest(TEXT, "guide", params))
    want = np.clip(
        np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)]), -1, 1
    )
    assert len(want) == 30 * 2 * 480
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768  # int16 rounding apart


def test_bench_sizes_requests_by_the_served_models_token_rate(cv_server, tmp_path):
    """`voxgate bench --url` asks the server its model's token rate: at CosyVoice 2's 25 tokens/s
    each request gets the workload's audio length, not 3.3x it (Orpheus's 82 tokens/s)."""
    from voxbench.config import BenchConfig
    from voxbench.metrics import Slo
    from voxbench.runner import BenchRun
    from voxbench.workload import tokens_for

    cfg = BenchConfig(
        url=cv_server.url,
        rates=(2.0,),
        bisect_steps=0,
        max_points=1,
        duration_s=0.5,
        min_requests=2,
        max_audio_seconds=0.4,
        slo=Slo(60_000, 0.0),  # this test is about the requests' size, not the CPU's speed
        warmup=0,
        settle_s=0.0,
        out_dir=tmp_path,
    )
    run = BenchRun(cfg)
    run.run()
    assert run.results["settings"]["token_rate"] == 25.0
    assert run.results["settings"]["token_rate_from"] == "server"
    [point] = run.results["systems"]["voxgate"]["points"]
    assert len(point["records"]) >= 2
    for rec in point["records"]:
        assert rec["tokens"] == tokens_for(rec["audio_seconds"], 25.0) == 10
        assert rec["ok"], rec
        # 40 ms of audio per token; a text of two sentences shares the budget (± rounding)
        assert abs(rec["done"]["audio_ms"] - 400) <= 80
