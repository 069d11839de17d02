"""Helpers for the gateway tests: a real uvicorn server in a thread, a small `websockets`
client that speaks docs/protocol.md, a barge-in on a voxgate.client session, and PyAV helpers
to check the audio that comes back."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import av
import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

from gateway.in_thread import InThreadGateway, serve_in_thread
from voxgate.client import Audio, ResponseDone, Session, Word, Words

# Random weights never emit the stop token: every request ends at max_tokens. 60 tokens is
# about 0.7 s of audio at tiny-orpheus' 82 tokens/s; temperature 0 keeps runs repeatable.
FAST_SAMPLING = {"temperature": 0.0, "max_tokens": 60}


# The gateway served from a thread (gateway/in_thread.py), as every gateway test runs it.
Server = InThreadGateway


def start_server(settings, engine, sndbuf: int | None = None) -> Server:
    """uvicorn in a thread on an ephemeral port (serve_in_thread: `sndbuf` stands in for a slow
    network path)."""
    return serve_in_thread(settings, engine, sndbuf)


# --- client helpers ---------------------------------------------------------------------------
@dataclass
class Played:
    """What the client received for one response."""

    started: dict
    done: dict
    frames: list[bytes] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # other JSON events in between


async def recv_json(ws: ClientConnection, timeout: float = 30) -> dict:
    """The next text frame (binary frames in between are a test failure)."""
    message = await asyncio.wait_for(ws.recv(), timeout)
    assert isinstance(message, str), f"expected a JSON event, got {len(message)} bytes of audio"
    return json.loads(message)


async def send(ws: ClientConnection, **event) -> None:
    await ws.send(json.dumps(event))


async def start_session(ws: ClientConnection, **fields) -> dict:
    fields.setdefault("sampling", FAST_SAMPLING)
    await send(ws, type="session.start", **fields)
    started = await recv_json(ws)
    assert started["type"] == "session.started", started
    return started


async def collect_response(ws: ClientConnection, timeout: float = 60) -> Played:
    """Read one response: response.started, binary frames, response.done."""
    started = await recv_json(ws, timeout)
    assert started["type"] == "response.started", started
    played = Played(started=started, done={})
    deadline = time.monotonic() + timeout
    while True:
        message = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
        if isinstance(message, bytes):
            played.frames.append(message)
            continue
        event = json.loads(message)
        if event["type"] == "response.done":
            assert event["response_id"] == started["response_id"]
            played.done = event
            return played
        played.events.append(event)


async def expect_close(ws: ClientConnection, timeout: float = 10) -> tuple[int | None, list]:
    """Read until the server closes; returns (close code, messages read before it)."""
    messages = []
    try:
        async with asyncio.timeout(timeout):
            async for message in ws:
                messages.append(json.loads(message) if isinstance(message, str) else message)
    except websockets.ConnectionClosed:
        pass
    return ws.close_code, messages


async def barge_in(
    session: Session, text: str, after_ms: int, heard_ms: int
) -> tuple[list[Word], ResponseDone]:
    """Speak `text` on a voxgate.client session and, once `after_ms` of its audio has arrived
    (20-ms frames), report that the listener heard `heard_ms` of it and cancel: (the timed
    words the response sent, its ResponseDone, which says it was cancelled)."""
    received_ms, sent_words, done = 0, [], None
    async for event in session.speak(text):
        if isinstance(event, Audio):
            received_ms += 20
            if received_ms == after_ms:
                await session.report_playback(heard_ms)
                await session.cancel()
        elif isinstance(event, Words):
            sent_words.extend(event.words)
        elif isinstance(event, ResponseDone):
            done = event
    assert done is not None and done.status == "cancelled"
    return sent_words, done


async def until_event(conn, kind: str, timeout: float = 60) -> tuple[object, list]:
    """Realtime (openai client) events up to the first of type `kind`: (that event, the ones
    before it)."""
    seen = []
    async with asyncio.timeout(timeout):
        while (event := await conn.recv()).type != kind:
            seen.append(event)
    return event, seen


async def wait_engine_idle(engine, timeout: float = 10) -> None:
    """Until the engine holds no request and no KV page (what a freed session leaves)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = engine.stats()
        if stats.kv_blocks_used == 0 and stats.running == 0 and stats.waiting == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"engine still busy: {stats}")
        await asyncio.sleep(0.05)


# --- audio checks -----------------------------------------------------------------------------
async def engine_pcm(engine, text: str, sampling: dict, voice: str | None = None) -> np.ndarray:
    """What the engine itself produces for the request the gateway makes (same voice, the
    model's default unless given, the model's sampling defaults overridden by the session's,
    greedy so it is repeatable)."""
    from engine.outputs import AudioChunk, SpeechRequest
    from engine.request import SamplingParams

    params = SamplingParams(**{**engine.facts.sampling_defaults, **sampling})
    voice = voice or engine.facts.default_voice
    stream = await engine.submit(SpeechRequest(text, voice, params))
    return np.concatenate([e.pcm async for e in stream if isinstance(e, AudioChunk)])


def decode_g711(data: bytes, codec: str) -> np.ndarray:
    """G.711 bytes (`pcm_mulaw` / `pcm_alaw`) → float32 PCM at 8 kHz."""
    dec = av.CodecContext.create(codec, "r")
    dec.sample_rate = 8000
    dec.layout = "mono"
    frames = dec.decode(av.Packet(data))
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32) / 32768


def resample(pcm: np.ndarray, src: int, dst: int) -> np.ndarray:
    """libswresample, as the gateway uses it, applied to a whole signal at once."""
    frame = av.AudioFrame.from_ndarray(pcm[None, :].astype(np.float32), format="flt", layout="mono")
    frame.sample_rate = src
    rs = av.AudioResampler(format="flt", layout="mono", rate=dst)
    out = [f.to_ndarray()[0] for f in rs.resample(frame) + rs.resample(None)]
    return np.concatenate(out)


def flite_speech(text: str, folder, rate: int) -> np.ndarray:
    """Speech synthesized offline by Debian's flite (voice slt), float32 mono at `rate`,
    trimmed of flite's own leading/trailing silence."""
    import subprocess

    wav = folder / f"speech-{abs(hash(text))}.wav"
    subprocess.run(["flite", "-voice", "slt", "-t", text, "-o", str(wav)], check=True)
    with av.open(str(wav)) as container:
        stream = container.streams.audio[0]
        src = stream.rate
        pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(stream)])
    pcm = pcm.astype(np.float32) / (32768.0 if pcm.dtype == np.int16 else 1.0)
    loud = np.flatnonzero(np.abs(pcm) > 0.02)
    return resample(pcm[loud[0] : loud[-1] + 1], src, rate)


def quiet_room(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """Near-silence: a quiet room's noise, not digital zero."""
    noise = np.random.default_rng(seed).standard_normal(int(seconds * rate))
    return (noise * 1e-3).astype(np.float32)


def decode_opus(packets: list[bytes]) -> np.ndarray:
    """Raw Opus packets (one per frame) → float32 PCM at 48 kHz."""
    dec = av.CodecContext.create("libopus", "r")
    dec.sample_rate = 48000
    dec.layout = "mono"
    out = np.concatenate(
        [f.to_ndarray().reshape(-1) for p in packets for f in dec.decode(av.Packet(p))]
    )
    if out.dtype == np.int16:  # libopus decodes to s16
        return out.astype(np.float32) / 32768
    return out.astype(np.float32)


def write_wav(path, pcm: np.ndarray, rate: int):
    """Mono float samples in [-1, 1] → a 16-bit WAV (Chromium's fake microphone reads these)."""
    import wave

    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def fail_first_encoder(monkeypatch) -> list[str]:
    """The next response's output encoder behaves as one whose encoder process died (every
    call raises CodecProcessFailed); later responses get real ones. Returns the failures
    raised, so a test can check the dead encoder was reached."""
    from gateway.app import Gateway
    from gateway.audio import ChunkEncoder
    from gateway.codec_workers import CodecProcessFailed

    raised: list[str] = []
    real_open = Gateway.open_encoder

    class DeadEncoder(ChunkEncoder):
        def __init__(self, spec, source_rate) -> None:
            self.spec, self.source_rate = spec, source_rate

        async def encode(self, pcm) -> list[bytes]:
            raised.append("encode")
            raise CodecProcessFailed("output encoder process voxgate-encoder-0 exited")

        async def flush(self) -> list[bytes]:
            raised.append("flush")
            raise CodecProcessFailed("output encoder process voxgate-encoder-0 exited")

    given = []

    def open_encoder(self, spec, source_rate):
        if given:
            return real_open(self, spec, source_rate)
        given.append(True)
        return DeadEncoder(spec, source_rate)

    monkeypatch.setattr(Gateway, "open_encoder", open_encoder)
    return raised
