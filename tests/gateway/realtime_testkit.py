"""Helpers for the `/v1/realtime` tests with audio in: the official `openai` package's Realtime
client pointed at a test server, and flite speech appended to its input audio buffer."""

from __future__ import annotations

import base64

import numpy as np
from gateway_testkit import flite_speech, quiet_room

RATE = 24000  # pcm16, the Realtime default


def realtime_client(server):
    """An `openai.AsyncOpenAI` whose `realtime.connect` reaches the server's `/v1/realtime`."""
    import openai

    return openai.AsyncOpenAI(
        base_url=server.http + "/v1",
        websocket_base_url=server.url.removesuffix("/stream"),
        api_key="unused",
    )


def utterance(text: str, tmp_path, seed: int) -> bytes:
    """The words between stretches of quiet room (half a second before, a second after: the
    end of the turn), as pcm16 at RATE."""
    pcm = np.concatenate(
        [
            quiet_room(0.5, RATE, seed),
            flite_speech(text, tmp_path, RATE),
            quiet_room(1.0, RATE, seed + 1),
        ]
    )
    return (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()


async def append(conn, data: bytes, chunk_s: float = 0.1) -> None:
    """pcm16 appended in `chunk_s` chunks, faster than real time (the server's VAD runs on the
    audio's clock)."""
    step = int(RATE * chunk_s) * 2
    for at in range(0, len(data), step):
        await conn.input_audio_buffer.append(audio=base64.b64encode(data[at : at + step]).decode())


async def speak(conn, text: str, tmp_path, seed: int, chunk_s: float = 0.1) -> None:
    """An utterance of `text`, appended in `chunk_s` chunks."""
    await append(conn, utterance(text, tmp_path, seed), chunk_s)
