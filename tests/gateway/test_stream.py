"""`/v1/stream` end to end: real uvicorn, real tiny-orpheus engine, the `websockets` client."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
import websockets
from gateway_testkit import (
    FAST_SAMPLING,
    collect_response,
    decode_opus,
    engine_pcm,
    expect_close,
    recv_json,
    resample,
    send,
    start_session,
    wait_engine_idle,
)

from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from voxgate.client import Reply, connect

ONE_SENTENCE = "Hello from the gateway."
OPUS_PRESKIP = 312  # libopus lookahead at 48 kHz: decoded audio starts this much late


def aligned_corr(
    decoded: np.ndarray, reference: np.ndarray, max_lag: int = 1000
) -> tuple[int, float, float]:
    """(lag, correlation, rms ratio) of decoded vs reference at the best lag."""
    n = len(reference) - max_lag
    lag = int(np.argmax([np.dot(decoded[k : k + n], reference[:n]) for k in range(max_lag)]))
    a, b = decoded[lag : lag + n], reference[:n]
    return lag, float(np.corrcoef(a, b)[0, 1]), float(np.std(a) / np.std(b))


async def test_opus_round_trip_matches_engine_audio(server, engine):
    sampling = {"temperature": 0.0, "max_tokens": 90}
    async with websockets.connect(server.url, subprotocols=["voxgate.v1"]) as ws:
        assert ws.subprotocol == "voxgate.v1"
        started = await start_session(ws, sampling=sampling)
        assert started["output_audio"] == {"format": "opus", "sample_rate": 48000, "frame_ms": 20}
        assert started["input_audio"] is None  # text-only model
        assert started["model"] == "tiny-orpheus"
        assert started["model_kind"] == "tts"
        assert started["token_rate_hz"] == engine.facts.token_rate_hz == 7 * 24000 / 2048
        assert started["limits"]["lead_ms"] == 1000
        await send(ws, type="text", text=ONE_SENTENCE)
        played = await collect_response(ws)
        await send(ws, type="session.end")
        assert await expect_close(ws) == (
            1000,
            [{"type": "session.ended", "reason": "client_ended"}],
        )
    done = played.done
    assert done["status"] == "length"  # random weights never stop: max_tokens ends it
    assert done["audio_ms"] == 20 * len(played.frames)
    assert done["ttfa_ms"] is not None and done["ttfa_ms"] > 0
    assert all(0 < len(f) < 1500 for f in played.frames)  # one raw Opus packet each, no Ogg

    reference = resample(await engine_pcm(engine, ONE_SENTENCE, sampling), 24000, 48000)
    decoded = decode_opus(played.frames)
    # Every reference sample is covered (plus the codec lookahead and the padded last frame).
    assert len(reference) + OPUS_PRESKIP <= len(decoded) <= len(reference) + OPUS_PRESKIP + 2 * 960
    lag, corr, rms_ratio = aligned_corr(decoded, reference)
    assert abs(lag - OPUS_PRESKIP) <= 24, lag
    # Opus is perceptual: on this random-weight model's noise-like output (a quarter of its
    # energy above 8 kHz, which Opus codes by band energy rather than waveform) 32 kbit/s keeps
    # a waveform correlation of ~0.75 (measured). Misalignment by a single millisecond already
    # drops it below 0.05, so every 100 ms window must stay above 0.5: a dropped, repeated or
    # reordered frame anywhere would push the windows after it to ~0 (the control below).
    assert corr > 0.5, corr
    window = 4800
    for start in range(0, len(reference) - window, window):
        a = decoded[lag + start : lag + start + window]
        assert np.corrcoef(a, reference[start : start + window])[0, 1] > 0.5, start
    assert 0.7 < rms_ratio < 1.3, rms_ratio  # loudness kept within ~±3 dB
    n = len(reference) - 960
    shifted = float(np.corrcoef(decoded[lag + 960 : lag + 960 + n], reference[:n])[0, 1])
    assert abs(shifted) < 0.2, shifted  # control: what one lost 20 ms frame looks like


async def test_pcm16_is_exactly_the_engine_audio(server, engine):
    """Lossless path: every engine sample arrives, in order, once (int16 rounding apart)."""
    sampling = {"temperature": 0.0, "max_tokens": 60}
    async with websockets.connect(server.url) as ws:
        await start_session(
            ws, sampling=sampling, output_audio={"format": "pcm16", "sample_rate": 24000}
        )
        await send(ws, type="text", text=ONE_SENTENCE)
        played = await collect_response(ws)
    assert {len(f) for f in played.frames} == {960}  # 20 ms at 24 kHz, 2 bytes a sample
    got = np.frombuffer(b"".join(played.frames), dtype="<i2").astype(np.float32) / 32768
    want = np.clip(await engine_pcm(engine, ONE_SENTENCE, sampling), -1, 1)
    assert len(want) <= len(got) < len(want) + 480
    assert np.max(np.abs(got[: len(want)] - want)) <= 1.5 / 32768
    assert not np.any(got[len(want) :])  # the padding of the last frame is silence


async def test_pcm16_and_mulaw_frame_sizes(server):
    for output, frame_bytes in [
        ({"format": "pcm16", "sample_rate": 16000, "frame_ms": 20}, 640),
        ({"format": "pcm16", "sample_rate": 8000, "frame_ms": 40}, 640),
        ({"format": "mulaw"}, 160),
        ({"format": "mulaw", "sample_rate": 8000, "frame_ms": 60}, 480),
    ]:
        async with websockets.connect(server.url) as ws:
            started = await start_session(ws, output_audio=output)
            frame_ms = started["output_audio"]["frame_ms"]
            await send(ws, type="text", text=ONE_SENTENCE)
            played = await collect_response(ws)
        assert {len(f) for f in played.frames} == {frame_bytes}, output
        assert played.done["audio_ms"] == frame_ms * len(played.frames)


async def test_streamed_text_starts_audio_before_final(server, engine):
    async with websockets.connect(server.url) as ws:
        await start_session(ws)
        for piece in ["This is the first sen", "tence of the answer. And th"]:
            await send(ws, type="text", text=piece, final=False)
        started = await recv_json(ws)
        assert started["type"] == "response.started"
        first_audio = await asyncio.wait_for(ws.recv(), 30)
        assert isinstance(first_audio, bytes)  # audio while the input is still open
        await send(ws, type="text", text="e second one closes it.", final=True)
        frames = [first_audio]
        while True:
            message = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(message, bytes):
                frames.append(message)
                continue
            done = json.loads(message)
            break
    assert done["type"] == "response.done" and done["response_id"] == started["response_id"]
    # Two sentences → two engine requests of max_tokens each, played as one response.
    one = np.concatenate(
        [
            e.pcm
            async for e in await engine.submit(
                SpeechRequest(
                    "This is the first sentence of the answer.",
                    engine.facts.default_voice,
                    SamplingParams(**{**engine.facts.sampling_defaults, **FAST_SAMPLING}),
                )
            )
            if isinstance(e, AudioChunk)
        ]
    )
    assert done["audio_ms"] == 20 * len(frames)
    assert done["audio_ms"] >= 2 * 1000 * len(one) / 24000 - 40


async def test_cancel_mid_response_is_prompt_and_frees_the_engine(server, engine):
    async with websockets.connect(server.url) as ws:
        await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 800})  # ~10 s of audio
        await send(ws, type="text", text="A long answer that we will interrupt. " * 3)
        assert (await recv_json(ws))["type"] == "response.started"
        assert isinstance(await asyncio.wait_for(ws.recv(), 30), bytes)
        assert engine.stats().kv_blocks_used > 0
        await send(ws, type="response.cancel")
        t0 = time.monotonic()
        frames_after = 0
        while True:
            message = await asyncio.wait_for(ws.recv(), 5)
            if isinstance(message, bytes):
                frames_after += 1  # released before the cancel; at most the lead
                continue
            done = json.loads(message)
            break
        assert time.monotonic() - t0 < 1.0
        assert done["type"] == "response.done" and done["status"] == "cancelled"
        assert done["audio_ms"] < 8000
        assert frames_after * 20 <= 1000 + 200
        await wait_engine_idle(engine)
        # The session is still usable, and a cancel with nothing playing is a no-op.
        await send(ws, type="response.cancel")
        await send(ws, type="text", text=ONE_SENTENCE)
        assert (await recv_json(ws))["type"] == "response.started"
        assert isinstance(await asyncio.wait_for(ws.recv(), 30), bytes)
        # session.end mid-response: the response is cancelled, then the session ends.
        await send(ws, type="session.end")
        code, messages = await expect_close(ws)
    events = [m for m in messages if isinstance(m, dict)]
    assert code == 1000
    assert [e["type"] for e in events] == ["response.done", "session.ended"]
    assert events[0]["status"] == "cancelled"
    await wait_engine_idle(engine)


async def test_queued_texts_play_as_successive_responses(server):
    async with connect(server.url, sampling={"temperature": 0.0, "max_tokens": 30}) as session:
        await session.send_text("First utterance.")
        await session.send_text("Second utterance.")
        first = await session.next_reply().collect()
        second = await session.next_reply().collect()
    assert first.response_id != second.response_id
    assert first.status == second.status == "length"
    assert first.frames and second.frames


async def test_playback_reports_reach_the_engine(server, engine):
    async with websockets.connect(server.url) as ws:
        await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 400})
        await send(ws, type="playback", played_ms=0)  # nothing playing: ignored
        await send(ws, type="text", text=ONE_SENTENCE)
        response_id = (await recv_json(ws))["response_id"]
        assert isinstance(await asyncio.wait_for(ws.recv(), 30), bytes)
        await send(ws, type="playback", played_ms=40)
        request = engine.core.scheduler.requests.get(f"{response_id}-s0")  # still generating
        for _ in range(100):
            if request is None or request.played_s is not None:
                break
            await asyncio.sleep(0.01)
        assert request is not None and request.played_s == 0.04
        await send(ws, type="response.cancel")
        while isinstance(message := await asyncio.wait_for(ws.recv(), 30), bytes):
            pass
        assert json.loads(message)["status"] == "cancelled"


@pytest.mark.parametrize("when", ["right after the text", "after the first frame"])
async def test_disconnect_at_any_point_frees_the_engine(server, engine, when):
    ws = await websockets.connect(server.url)
    await start_session(ws, sampling={"temperature": 0.0, "max_tokens": 800})
    await send(ws, type="text", text="Two sentences to keep the engine busy. " * 2)
    if when == "after the first frame":
        assert (await recv_json(ws))["type"] == "response.started"
        assert isinstance(await asyncio.wait_for(ws.recv(), 30), bytes)
    ws.transport.abort()  # no close frame: the network just goes away
    await asyncio.sleep(0.2)
    await wait_engine_idle(engine)
    await asyncio.sleep(0.3)  # and nothing admitted late (a submit racing the disconnect)
    assert engine.stats().running == engine.stats().waiting == engine.stats().kv_blocks_used == 0


async def test_twenty_concurrent_sessions(server, engine):
    async def one(i: int) -> Reply:
        sampling = {"temperature": 0.0, "max_tokens": 40, "seed": i}
        async with connect(server.url, sampling=sampling, decode_audio=False) as session:
            async with asyncio.timeout(120):
                reply = await session.speak(f"Session number {i} says hello.").collect()
            assert await session.end() == "client_ended"
            assert session.close_code == 1000
            return reply

    results = await asyncio.gather(*(one(i) for i in range(20)))
    assert all(r.status == "length" and r.frames for r in results)
    assert len({r.response_id for r in results}) == 20
    await wait_engine_idle(engine)
