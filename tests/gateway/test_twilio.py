"""`/v1/twilio` end to end: a client that speaks Twilio Media Streams exactly as Twilio documents
it (connected, start, media, mark, dtmf, stop; JSON text frames, base64 μ-law 8 kHz) against a
real uvicorn server and the real tiny-orpheus engine."""

from __future__ import annotations

import asyncio
import base64
import json
import xml.etree.ElementTree as ET

import httpx
import numpy as np
import websockets
from gateway_testkit import decode_g711, engine_pcm, expect_close, resample, wait_engine_idle

GREETING = "Thanks for calling Voxgate."
STREAM_SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
CALL_SID = "CA0123456789abcdef0123456789abcdef"
ACCOUNT_SID = "AC0123456789abcdef0123456789abcdef"
SILENCE = bytes([0xFF]) * 160  # 20 ms of μ-law silence


class FakeTwilio:
    """Twilio's side of one bidirectional stream, message for message."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.sequence = 0
        self.chunk = 0

    async def send(self, event: str, **fields) -> None:
        self.sequence += 1
        message = {"event": event, "sequenceNumber": str(self.sequence), **fields}
        if event != "connected":
            message["streamSid"] = STREAM_SID
        await self.ws.send(json.dumps(message))

    async def open(self, **parameters: str) -> None:
        await self.ws.send(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )
        await self.send(
            "start",
            start={
                "streamSid": STREAM_SID,
                "accountSid": ACCOUNT_SID,
                "callSid": CALL_SID,
                "tracks": ["inbound"],
                "customParameters": parameters,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            },
        )

    async def caller_speaks(self, payload: bytes = SILENCE) -> None:
        self.chunk += 1
        media = {
            "track": "inbound",
            "chunk": str(self.chunk),
            "timestamp": str(20 * self.chunk),
            "payload": base64.b64encode(payload).decode(),
        }
        await self.send("media", media=media)

    async def recv(self, timeout: float = 30) -> dict:
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))


def fast(**extra: str) -> dict[str, str]:
    # Stream parameters are strings; random weights never stop, so a token budget ends replies.
    return {"greeting": GREETING, "temperature": "0", "max_tokens": "60", **extra}


async def test_greeting_plays_as_mulaw_with_marks_echoed(make_server, engine):
    server = make_server()
    url = server.url.replace("/v1/stream", "/v1/twilio")
    audio, marks = b"", []
    async with websockets.connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.open(**fast())
        for _ in range(5):
            await twilio.caller_speaks()  # inbound audio is taken, and does not disturb output
        while True:
            message = await twilio.recv()
            assert message["streamSid"] == STREAM_SID
            if message["event"] == "media":
                audio += base64.b64decode(message["media"]["payload"])
            elif message["event"] == "mark":
                marks.append(message["mark"]["name"])
                await twilio.send("mark", mark=message["mark"])  # played: Twilio echoes it
                if marks[-1].endswith(":end"):  # the response's last mark
                    break
            else:
                raise AssertionError(message)
        await twilio.send("stop", stop={"accountSid": ACCOUNT_SID, "callSid": CALL_SID})
        code, after = await expect_close(ws)
    assert code == 1000 and after == []
    assert len(audio) % 160 == 0  # whole 20 ms frames
    response_id = marks[-1].split(":")[0]
    assert marks[-1] == f"{response_id}:{len(audio) // 8}:end"  # 8 μ-law bytes a millisecond
    assert marks[:-1] == [f"{response_id}:{ms}" for ms in range(500, len(audio) // 8, 500)]
    got = decode_g711(audio, "pcm_mulaw")
    want = resample(
        await engine_pcm(engine, GREETING, {"temperature": 0.0, "max_tokens": 60}), 24000, 8000
    )
    assert len(want) <= len(got) < len(want) + 160
    n = len(want) - 100
    assert np.max(np.abs(got[:n] - np.clip(want[:n], -1, 1))) < 0.03


async def test_marks_report_playback_and_a_key_press_clears(server, engine):
    url = server.url.replace("/v1/stream", "/v1/twilio")
    async with websockets.connect(url) as ws:
        twilio = FakeTwilio(ws)
        await twilio.open(**fast(max_tokens="600"))  # ~7 s: still generating when marked
        while (message := await twilio.recv())["event"] != "mark":
            assert message["event"] == "media"
        response_id, played = message["mark"]["name"].rsplit(":", 1)
        await twilio.send("mark", mark=message["mark"])
        request = engine.core.scheduler.requests.get(f"{response_id}-s0")
        for _ in range(100):
            if request is None or request.played_s is not None:
                break
            await asyncio.sleep(0.01)
        assert request is not None and request.played_s == int(played) / 1000

        await twilio.send("dtmf", dtmf={"track": "inbound_track", "digit": "1"})  # barge-in
        while (message := await twilio.recv())["event"] != "clear":
            assert message["event"] in ("media", "mark")
        assert message == {"event": "clear", "streamSid": STREAM_SID}
        await wait_engine_idle(engine)
        await twilio.send("stop", stop={"accountSid": ACCOUNT_SID, "callSid": CALL_SID})
        code, _ = await expect_close(ws)
        assert code == 1000


async def test_media_before_start_is_refused(server):
    url = server.url.replace("/v1/stream", "/v1/twilio")
    async with websockets.connect(url) as ws:
        await FakeTwilio(ws).caller_speaks()
        code, messages = await expect_close(ws)
    assert code == 1008 and messages == []  # Twilio has no error message: only the close


def test_twiml_connects_the_call_to_the_stream(server):
    reply = httpx.post(server.http + "/v1/twilio/twiml", params={"greeting": "Hi & bye", "x": "1"})
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("application/xml")
    root = ET.fromstring(reply.text)
    stream = root.find("./Connect/Stream")
    assert stream.get("url") == server.url.replace("/v1/stream", "/v1/twilio")
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert parameters == {"greeting": "Hi & bye"}
