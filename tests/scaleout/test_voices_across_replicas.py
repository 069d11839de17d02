"""Voices from clients with two engine replicas (`voxgate serve --replicas 2`, tiny-chatterbox on
the CPU): a voice added once over HTTP speaks on both replicas exactly as the --voices-dir voice
made from the same clip; after one replica is killed and rebuilt, it is given the voice again
before it serves, so sessions in the voice speak on it too; a deleted voice is gone from both."""

from __future__ import annotations

import base64
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

# Ray is the optional `ray` extra (`make test` installs it).
pytest.importorskip("ray", reason="Ray is not installed: pip install 'voxgate[ray]'")

import websockets  # noqa: E402
from gateway_testkit import collect_response, expect_close, send, start_session  # noqa: E402
from reliability_kit import ServeProcess, metrics, until  # noqa: E402
from scaleout_kit import TWO_REPLICAS, per_replica, replica_pid, serving  # noqa: E402

from gateway.synth import write_wav  # noqa: E402

TEXT = "Hello from a replica."
SAMPLING = {"temperature": 0.0, "max_tokens": 20, "min_tokens": 20}
PCM24 = {"format": "pcm16", "sample_rate": 24000}


def clip_wav(path) -> None:
    """A 2.5 s 16 kHz WAV: a wavering tone and a little noise, loud enough to be voiced."""
    t = np.arange(40000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 150 * t * (1 + 0.2 * np.sin(2 * np.pi * 3 * t)))
    noise = 0.02 * np.random.default_rng(3).standard_normal(t.size)
    write_wav(Path(path), tone + noise, 16000)


@pytest.fixture(scope="module")
def cloning_replicas(tmp_path_factory) -> Iterator[tuple[ServeProcess, bytes]]:
    """tiny-chatterbox on two CPU replicas, the test's clip also its --voices-dir `narrator`."""
    voices = tmp_path_factory.mktemp("voices")
    clip_wav(voices / "narrator.wav")
    args = ("--model", "tiny-chatterbox", "--voices-dir", str(voices), *TWO_REPLICAS)
    with serving(tmp_path_factory, "voices", *args) as server:
        yield server, (voices / "narrator.wav").read_bytes()


async def open_session(server: ServeProcess, voice: str):
    """A session in `voice`, placed (and pinned) when its socket opened."""
    ws = await websockets.connect(server.ws + "/v1/stream", close_timeout=1)
    await start_session(ws, sampling=SAMPLING, output_audio=PCM24, voice=voice)
    return ws


async def speak(ws) -> np.ndarray:
    await send(ws, type="text", text=TEXT)
    played = await collect_response(ws)
    assert played.done["status"] == "length", played.done
    return np.frombuffer(b"".join(played.frames), dtype="<i2")


async def speak_on_both_replicas(server: ServeProcess, voice: str) -> list[np.ndarray]:
    """One session in `voice` on each replica (two held open at once spread over them)."""
    sessions = [await open_session(server, voice) for _ in range(2)]
    spread = per_replica(await metrics(server), "voxgate_replica_sessions")
    assert spread == {"replica-0": 1, "replica-1": 1}, spread
    try:
        return [await speak(ws) for ws in sessions]
    finally:
        for ws in sessions:
            await ws.close()


async def test_a_clients_voice_serves_on_every_replica_and_outlives_a_restart(cloning_replicas):
    server, clip = cloning_replicas
    async with httpx.AsyncClient(base_url=server.http, timeout=120) as client:
        response = await client.post("/v1/voices", json={"audio": base64.b64encode(clip).decode()})
        assert response.status_code == 201, response.text
        voice = response.json()["name"]

    ws = await open_session(server, "narrator")
    narrator = await speak(ws)
    await ws.close()
    assert len(narrator) > 0
    for spoken in await speak_on_both_replicas(server, voice):
        assert np.array_equal(spoken, narrator)  # the clip's conditioning, on either replica

    os.kill(replica_pid(server, "replica-0"), signal.SIGKILL)

    async def back():
        m = await metrics(server)
        restarted = per_replica(m, "voxgate_replica_restarts_total")["replica-0"] == 1
        return m if restarted and per_replica(m, "voxgate_replica_up")["replica-0"] == 1 else None

    await until(back, 120, "replica-0 to be rebuilt")
    async with httpx.AsyncClient(base_url=server.http, timeout=30) as client:
        listed = (await client.get("/v1/voices")).json()["voices"]
    assert voice in [v["name"] for v in listed if v["source"] == "client"]
    for spoken in await speak_on_both_replicas(server, voice):
        assert np.array_equal(spoken, narrator)  # the rebuilt replica had it before serving
    assert "was given the clients' voices again (1)" in server.log_text()

    async with httpx.AsyncClient(base_url=server.http, timeout=30) as client:
        assert (await client.delete(f"/v1/voices/{voice}")).status_code == 204
    async with websockets.connect(server.ws + "/v1/stream") as ws:
        await send(ws, type="session.start", sampling=SAMPLING, voice=voice)
        _, messages = await expect_close(ws)
    assert messages and messages[0]["code"] == "bad_field"
    assert server.alive
