"""Microphones decoded in processes of the gateway's own (`--decode-processes`): the samples
equal the event loop's own decoding packet for packet, a bad packet is an `error` and the
packets after it still play, a session's audio keeps its order, and an `input.commit` ends the
conversation with every packet sent before it; a dead decoder process costs its sessions a
packet or two, not the conversation."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import numpy as np
import pytest
import websockets
from duplex_testkit import microphone_packets
from gateway_testkit import expect_close, recv_json, send, start_server, start_session

from gateway.audio_in import DirectOpusDecoder
from gateway.codec_workers import MIC_DECODERS, CodecWorkers, PooledDecoder
from gateway.opus_lib import load_opus, packet_ms

RATE = 24000
BAD_PACKET = b"\xff\xff\xff"  # code 3 with a zero frame count: libopus refuses it


async def commit_and_end(ws) -> tuple[list[dict], int]:
    """`input.commit`, the conversation's events up to its `response.done` and how many audio
    frames came with them, then `session.end` and the close."""
    await send(ws, type="input.commit")
    events, frames = [], 0
    while not events or events[-1]["type"] != "response.done":
        message = await asyncio.wait_for(ws.recv(), 30)
        if isinstance(message, str):
            events.append(json.loads(message))
        else:
            frames += 1
    await send(ws, type="session.end")
    await expect_close(ws, timeout=30)
    return events, frames


@pytest.fixture(scope="module")
def decoders():
    pool = CodecWorkers(1, role=MIC_DECODERS).start()
    yield pool
    pool.close()


async def test_a_process_decodes_what_the_loop_would_packet_for_packet(decoders):
    packets = microphone_packets(seed=5)[:40]
    local = DirectOpusDecoder(RATE, load_opus())
    remote = decoders.open_decoder(RATE)
    # Calls of four packets, all in flight at once as a busy session's would be: they come
    # back in order, each the samples of its packets one after another.
    calls = [packets[i : i + 4] for i in range(0, len(packets), 4)]
    results = await asyncio.gather(*(remote.decode(call) for call in calls))
    for call, result in zip(calls, results, strict=True):
        got, bad = PooledDecoder.decoded(result)
        assert got.dtype == np.float32 and not bad
        np.testing.assert_array_equal(got, np.concatenate([local.decode(p) for p in call]))
    remote.close()


async def test_a_bad_packet_fails_alone(decoders):
    packets = microphone_packets(seed=6)[:6]
    local = DirectOpusDecoder(RATE, load_opus())
    remote = decoders.open_decoder(RATE)
    got, bad = PooledDecoder.decoded(await remote.decode(packets[:3] + [BAD_PACKET] + packets[3:]))
    assert len(bad) == 1 and "opus" in bad[0]
    np.testing.assert_array_equal(got, np.concatenate([local.decode(p) for p in packets]))
    assert decoders.alive == 1


def test_packet_lengths_from_the_table_of_contents():
    packets = microphone_packets(seed=8)[:5]
    assert [packet_ms(p) for p in packets] == [20] * 5  # what the gateway's encoder sends
    assert packet_ms(bytes([(3 << 3) | 0])) == 60  # SILK, 60 ms, one frame
    assert packet_ms(bytes([(16 << 3) | 1, 0])) == 5  # CELT 2.5 ms, two frames
    assert packet_ms(bytes([(31 << 3) | 3, 0x83])) == 60  # CELT 20 ms, three frames (code 3)
    assert packet_ms(bytes([(31 << 3) | 3])) is None and packet_ms(b"") is None


def test_a_bad_packet_is_an_error_and_the_conversation_plays_on(moshi_mic_server):
    packets = microphone_packets(seed=9)[:50]

    async def main():
        async with websockets.connect(moshi_mic_server.url, subprotocols=["voxgate.v1"]) as ws:
            await start_session(ws, sampling={"temperature": 0.0})
            for i, packet in enumerate(packets):
                await ws.send(BAD_PACKET if i == 20 else packet)
                await asyncio.sleep(0.02)
            return await commit_and_end(ws)

    events, frames = asyncio.run(main())
    [error] = [e for e in events if e["type"] == "error"]
    assert error["code"] == "unsupported_audio" and not error["fatal"]
    assert events[-1]["status"] == "completed" and frames > 0


def test_a_commit_ends_the_conversation_with_all_the_audio_before_it(
    moshi_mic_server, moshi_engine, monkeypatch
):
    """A burst of packets and at once `input.commit`: the packets are still being decoded when
    the commit is read, and all of them reach the conversation, before its end."""
    calls: list[tuple[str, str, int]] = []
    real_push, real_end = moshi_engine.push_audio, moshi_engine.end_session

    def push_audio(request_id, pcm):
        calls.append(("push", request_id, len(pcm)))
        return real_push(request_id, pcm)

    def end_session(request_id):
        calls.append(("end", request_id, 0))
        return real_end(request_id)

    monkeypatch.setattr(moshi_engine, "push_audio", push_audio)
    monkeypatch.setattr(moshi_engine, "end_session", end_session)
    packets = microphone_packets(seed=7)[:105]

    async def main():
        async with websockets.connect(moshi_mic_server.url, subprotocols=["voxgate.v1"]) as ws:
            await start_session(ws, sampling={"temperature": 0.0})
            for packet in packets[:4]:  # one 80-ms frame opens the conversation
                await ws.send(packet)
            started = await recv_json(ws)
            assert started["type"] == "response.started", started
            for packet in packets[4:]:  # 2 s more, as fast as the socket takes them
                await ws.send(packet)
            events, _ = await commit_and_end(ws)
            return started["response_id"], events

    response_id, events = asyncio.run(main())
    assert events[-1]["status"] == "completed"
    assert not [e for e in events if e["type"] in ("error", "response.started")]
    ours = [c for c in calls if c[1] == response_id]
    assert ours[-1][0] == "end" and [c[0] for c in ours].count("end") == 1
    # 105 packets of 480 samples: 630 ms … 26 whole 80-ms frames (1,920 samples each).
    pushed = sum(n for kind, _, n in ours if kind == "push")
    assert pushed == (len(packets) * 480 // 1920) * 1920


def test_a_dead_decoder_process_sends_its_sessions_back_to_the_loop(moshi_engine, monkeypatch):
    """The session's decoder process is killed mid-conversation: the conversation plays on,
    its audio decoded on the event loop from then on, and nothing fails or is lost: the
    packets the process took with it are decoded on the loop, before those sent after."""
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-moshi", decode_processes=1), moshi_engine)
    pool = server.app.state.gateway.mic_workers
    pushed: list[int] = []
    real_push = moshi_engine.push_audio

    def push_audio(request_id, pcm):
        pushed.append(len(pcm))
        return real_push(request_id, pcm)

    monkeypatch.setattr(moshi_engine, "push_audio", push_audio)
    packets = microphone_packets(seed=10)[:100]

    async def main():
        async with websockets.connect(server.url, subprotocols=["voxgate.v1"]) as ws:
            await start_session(ws, sampling={"temperature": 0.0})
            for i, packet in enumerate(packets):
                if i == 30:
                    os.kill(pool._workers[0].process.pid, signal.SIGKILL)
                await ws.send(packet)
                await asyncio.sleep(0.02)
            events, _ = await commit_and_end(ws)
            return events

    try:
        events = asyncio.run(main())
    finally:
        server.stop()
    assert events[-1]["status"] == "completed"
    assert not [e for e in events if e["type"] == "error"]
    # Every packet's 480 samples, in whole 80-ms frames (1,920 samples): none went with the
    # dead process.
    assert sum(pushed) == (len(packets) * 480 // 1920) * 1920
