"""Real `voxgate serve` processes on loopback for the reliability suite (reliability_kit.py),
one per configuration for the whole test session."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "gateway"))  # gateway_testkit

from reliability_kit import ORPHEUS_ENGINE_PROCESS, ServeProcess  # noqa: E402


@pytest.fixture(scope="session")
def orpheus_server(tmp_path_factory) -> Iterator[ServeProcess]:
    """tiny-orpheus with the engine in its own process, which the crash tests kill
    (reliability_kit.ORPHEUS_ENGINE_PROCESS)."""
    log = tmp_path_factory.mktemp("serve") / "orpheus.log"
    server = ServeProcess(*ORPHEUS_ENGINE_PROCESS, log=log)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def csm_server(tmp_path_factory) -> Iterator[ServeProcess]:
    """tiny-csm, a cloning model cheap on the CPU, with the engine in its own process, for the
    voices clients add (test_engine_crash.py kills the engine under one)."""
    log = tmp_path_factory.mktemp("serve") / "csm.log"
    server = ServeProcess(
        "--model",
        "tiny-csm",
        "--engine-process",
        "--no-realtime-admission",
        "--kv-cache-mb",
        "64",
        log=log,
    )
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory) -> Iterator[ServeProcess]:
    """voxgate-tiny as `voxgate serve` runs it by default on a CPU: engine process, int8,
    real-time admission calibrated at warm-up. Session caps are lifted (admission alone
    decides) and a slow client is dropped after a second of unread audio."""
    log = tmp_path_factory.mktemp("serve") / "tiny.log"
    server = ServeProcess(
        "--model",
        "voxgate-tiny",
        "--max-sessions",
        "2000",
        "--max-sessions-per-key",
        "0",
        "--max-send-queue-ms",
        "1000",
        log=log,
    )
    yield server
    server.stop()
