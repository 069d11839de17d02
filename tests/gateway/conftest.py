"""Gateway test fixtures: the real tiny-orpheus engine behind real uvicorn servers on 127.0.0.1,
and a tiny-moshi engine behind its own server for the full-duplex tests.

One engine serves every server of the test session (building it costs seconds); each distinct
GatewaySettings gets its own server, in its own thread and event loop, as in production.
Real-time admission is off in them: these tests are about the protocol, and a shared CI core
does not carry even two tiny-orpheus streams in real time (tests/reliability tests admission).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest
from gateway_testkit import Server, start_server


@pytest.fixture(scope="session")
def engine():
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine(
        "tiny-orpheus", config=EngineConfig(kv_cache_mb=64, realtime_admission=False)
    )
    yield eng
    asyncio.run(eng.shutdown())


def server_factory(engine, model: str) -> tuple:
    """(make(**settings_overrides) → a running Server, one per distinct settings; stop_all)."""
    from gateway.config import GatewaySettings

    servers: dict[tuple, Server] = {}

    def make(**overrides) -> Server:
        key = tuple(sorted((k, repr(v)) for k, v in overrides.items()))
        if key not in servers:
            settings = replace(GatewaySettings(model=model), **overrides)
            servers[key] = start_server(settings, engine)
        return servers[key]

    def stop_all() -> None:
        for server in servers.values():
            server.stop()

    return make, stop_all


@pytest.fixture(scope="session")
def make_server(engine) -> Iterator:
    """make_server(**settings_overrides) → a running Server (one per distinct settings)."""
    make, stop_all = server_factory(engine, "tiny-orpheus")
    yield make
    stop_all()


@pytest.fixture(scope="session")
def tiny_engine():
    """The default model, voxgate-tiny (its shipped, trained weights), in this process: it ends
    its sentences itself and times its words (its reading pointer)."""
    from engine.config import EngineConfig
    from engine.factory import build_engine
    from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

    if not (SHIPPED_WEIGHTS / "config.json").exists():
        pytest.skip("voxgate-tiny weights not shipped (training/README.md)")
    eng = build_engine(
        "voxgate-tiny", config=EngineConfig(realtime_admission=False, engine_process=False)
    )
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="session")
def make_tiny_server(tiny_engine) -> Iterator:
    """make_tiny_server(**settings_overrides) → a voxgate-tiny Server (one per settings)."""
    make, stop_all = server_factory(tiny_engine, "voxgate-tiny")
    yield make
    stop_all()


@pytest.fixture(scope="session")
def server(make_server) -> Server:
    """The default server: no auth, default limits."""
    return make_server()


@pytest.fixture(scope="session")
def moshi_engine():
    """The full-duplex engine (tiny-moshi), shared by every full-duplex test."""
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine("tiny-moshi", config=EngineConfig(kv_cache_mb=64))
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="session")
def moshi_server(moshi_engine) -> Iterator[Server]:
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-moshi"), moshi_engine)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moshi_mic_server(moshi_engine) -> Iterator[Server]:
    """The same engine behind a gateway that decodes microphones in a process of its own."""
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-moshi", decode_processes=1), moshi_engine)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def glm_engine():
    """The turn-based speech-to-speech engine (tiny-glm-voice), with audio out."""
    from engine.config import EngineConfig
    from engine.factory import build_engine

    eng = build_engine(
        "tiny-glm-voice", config=EngineConfig(kv_cache_mb=64, realtime_admission=False)
    )
    assert eng.core.model.decoder is not None, (
        "tiny-glm-voice speaks through its flow + HiFT decoder"
    )
    yield eng
    asyncio.run(eng.shutdown())


@pytest.fixture(scope="session")
def glm_server(glm_engine) -> Iterator[Server]:
    from gateway.config import GatewaySettings

    server = start_server(GatewaySettings(model="tiny-glm-voice"), glm_engine)
    yield server
    server.stop()


@pytest.fixture
def conversations(monkeypatch) -> list:
    """The TurnConversation of every session started during the test (server side)."""
    from gateway.turns import TurnConversation

    started: list = []
    original = TurnConversation.start

    def start(self, *args, **kwargs):
        started.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TurnConversation, "start", start)
    return started


@pytest.fixture(scope="session")
def csm_voices(tmp_path_factory):
    """A server for voices from clients (test_client_voices.py, test_browser_voices.py):
    tiny-csm, which clones, in an engine process of its own (clips are encoded there) under
    the supervisor (which replaces it when it dies), API keys, and the voices tests' clip also
    as a --voices-dir voice, `narrator`."""
    import threading

    from clip_files import VOICE_CLIP, VOICE_TRANSCRIPT, VOICES_KEYS, VoicesServer

    from engine.config import EngineConfig
    from engine.factory import build_engine
    from gateway.config import GatewaySettings
    from gateway.supervisor import RestartPolicy, SupervisedEngine

    folder = tmp_path_factory.mktemp("voices")
    (folder / "narrator.wav").write_bytes(VOICE_CLIP)
    (folder / "narrator.txt").write_text(VOICE_TRANSCRIPT)  # speaker 0, as clients' voices are

    def factory():
        config = EngineConfig(kv_cache_mb=64, realtime_admission=False, engine_process=True)
        return build_engine("tiny-csm", config=config, voices_dir=str(folder))

    policy = RestartPolicy(backoff_s=0.05, max_backoff_s=0.2, poll_s=0.02)
    engine = SupervisedEngine(factory, factory(), policy)  # the app's lifespan watches it
    settings = GatewaySettings(
        model="tiny-csm",
        api_keys=VOICES_KEYS,
        client_voices_per_key=2,
        max_clip_bytes=VoicesServer.MAX_CLIP_BYTES,
        max_message_bytes=2**20,  # so that a session.start with a clip over the cap arrives
    )
    server = start_server(settings, engine)
    yield VoicesServer(server, engine)
    server.stop()
    # On a thread of its own: pytest-asyncio may have an event loop running on this one.
    closer = threading.Thread(target=asyncio.run, args=(engine.shutdown(),))
    closer.start()
    closer.join(timeout=60)
