"""`voxgate serve`: options → settings, clear errors, and the real command in a subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import websockets
from gateway_testkit import collect_response, expect_close, send, start_session

from gateway.cli import build_parser, main
from gateway.serve_cli import settings_from_args

REPO = Path(__file__).resolve().parents[2]


def parse(*argv: str):
    return build_parser().parse_args(["serve", *argv])


def test_options_become_settings(tmp_path):
    args = parse(
        "--port",
        "9001",
        "--api-key",
        "k-one",
        "--api-key",
        "k-two",
        "--allowed-origin",
        "https://app.example.com",
        "--max-sessions-per-key",
        "3",
        "--lead-ms",
        "400",
        "--device",
        "cpu",
        "--first-hop-tokens",
        "12",
        "--max-detok-batch",
        "8",
        "--first-audio-margin",
        "2.5",
        "--first-audio-budget",
        "0.4",
        "--no-llm-priority",
        "--trace-requests",
        str(tmp_path / "trace.jsonl"),
    )
    environ = {"VOXGATE_API_KEYS": "k-two,k-three", "VOXGATE_TWILIO_AUTH_TOKEN": "tw-secret"}
    settings = settings_from_args(args, environ=environ)
    assert settings.twilio_auth_token == "tw-secret" and "tw-secret" not in repr(settings)
    assert settings.port == 9001
    assert settings.api_keys == ("k-one", "k-two", "k-three")
    assert settings.allowed_origins == ("https://app.example.com",)
    assert settings.max_sessions_per_key == 3 and settings.lead_ms == 400
    assert settings.engine.device == "cpu" and settings.engine.load_options == {
        "first_hop_tokens": 12
    }
    assert settings.engine.max_detok_batch == 8
    assert settings.engine.first_audio_margin == 2.5 and settings.engine.first_audio_budget_s == 0.4
    assert not settings.engine.llm_stream_priority
    assert settings.engine.trace_path == str(tmp_path / "trace.jsonl")
    defaults = settings_from_args(parse(), environ={}).engine
    assert defaults.llm_stream_priority and defaults.trace_path is None
    assert defaults.first_audio_margin is None and defaults.first_audio_budget_s == 0.35


def test_an_unwritable_trace_file_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="--trace-requests .*cannot write there"):
        settings_from_args(parse("--trace-requests", str(blocker / "trace.jsonl")), environ={})


def test_cpu_options_are_left_to_the_model_unless_given():
    """--cpu-int8 / --cpu-threads / --engine-process: None lets engine/factory.py pick per model
    (voxgate-tiny on the CPU: on, half the cores, a process); --no-… turns each off. Real-time
    admission is on for every model unless --no-realtime-admission."""
    engine = settings_from_args(parse("--device", "cpu"), environ={}).engine
    assert (engine.cpu_int8, engine.cpu_threads, engine.engine_process) == (None, None, None)
    assert engine.realtime_admission is True
    engine = settings_from_args(
        parse(
            "--no-cpu-int8",
            "--cpu-threads",
            "2",
            "--no-engine-process",
            "--no-realtime-admission",
        ),
        environ={},
    ).engine
    assert (engine.cpu_int8, engine.cpu_threads, engine.engine_process) == (False, 2, False)
    assert engine.realtime_admission is False
    assert settings_from_args(parse("--cpu-int8"), environ={}).engine.cpu_int8 is True


def test_synth_is_still_there():
    assert build_parser().parse_args(["synth", "--text", "hi", "--out", "x.wav"]).command == "synth"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--port", "70000"], "--port must be"),
        (["--api-key", "has space"], "API keys"),
        (["--allowed-origin", "app.example.com"], "allowed origin"),
        (["--lead-ms", "-5"], "--lead-ms must be"),
        (["--policy", "slack", "--max-num-seqs", "0"], "--max-num-seqs must be >= 1"),
        (["--gil-switch-ms", "0"], "--gil-switch-ms must be in"),
        (["--steady-batch-rows", "-1"], "--steady-batch-rows must be >= 0"),
        (["--first-hop-tokens", "0"], "--first-hop-tokens must be >= 1"),
        (["--snac-large-chunk-frames", "17"], "--snac-large-chunk-frames must be 4-16"),
        (["--snac-chunk-ramp", "0"], "--snac-chunk-ramp must be in (0, 1]"),
        (["--max-detok-batch", "0"], "--max-detok-batch must be >= 1"),
        (["--cpu-threads", "0"], "--cpu-threads must be >= 1"),
    ],
)
def test_bad_options_fail_clearly(argv, words, capsys):
    assert main(["serve", *argv]) == 2
    assert words in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("engine_args", [[], ["--engine-process"]], ids=["thread", "process"])
async def test_voxgate_serve_runs_end_to_end(engine_args):
    port = free_port()
    env = {**os.environ, "VOXGATE_API_KEYS": "cli-test-key"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "--log-level",
            "warning",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--device",
            "cpu",
            "--kv-cache-mb",
            "16",
            # Admission's calibration at warm-up only delays /ready here; the reliability
            # suite's tiny_server serves with it calibrated.
            "--no-realtime-admission",
            *engine_args,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            while True:
                assert proc.poll() is None, proc.stdout.read()
                try:
                    if (await client.get("/ready")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "voxgate serve did not become ready"
                await asyncio.sleep(0.2)
        url = f"ws://127.0.0.1:{port}/v1/stream"
        headers = {"Authorization": "Bearer cli-test-key"}
        async with websockets.connect(url, additional_headers=headers) as ws:
            await start_session(ws)
            await send(ws, type="text", text="Served from the command line.")
            played = await collect_response(ws)
            assert played.frames
            await send(ws, type="session.end")
            assert (await expect_close(ws))[0] == 1000
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 130, -signal.SIGINT)
