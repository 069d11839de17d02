"""`voxgate serve` with a bad configuration ends with one line saying what to do, never a
traceback (gateway/startup.py)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.api import ConfigError
from gateway.config import GatewaySettings
from gateway.startup import check_port, explain
from models.checkpoint_errors import CheckpointError

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = GatewaySettings(host="127.0.0.1", port=8123)


def serve(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=ROOT,
    )


def assert_one_line(result: subprocess.CompletedProcess, *words: str) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    # Nothing about a server that never started: who may connect is said once it serves.
    assert "API keys" not in result.stderr, result.stderr[-2000:]
    return errors[0]


def test_a_port_in_use_is_one_line_before_any_model_loads():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(OSError) as raised:
            check_port("127.0.0.1", port)
        result = serve("--model", "tiny-orpheus", "--port", str(port))
    assert raised.value.errno == errno.EADDRINUSE
    assert_one_line(result, f"port {port}", "already in use", "--port")
    assert "engine ready" not in result.stderr  # refused before loading anything


def test_an_unknown_model_is_one_line():
    result = serve("--model", "no-such-model", "--port", "0")
    assert_one_line(result, "no-such-model", "Hugging Face repo id")


def test_a_transcription_model_that_does_not_load_is_one_line_before_the_engine(tmp_path):
    pytest.importorskip("faster_whisper")
    empty = tmp_path / "whisper"
    empty.mkdir()
    result = serve("--input-transcription-model", str(empty), "--port", "0")
    assert_one_line(result, "--input-transcription-model", "could not be loaded", "base.en")
    assert "engine ready" not in result.stderr


def unreachable_hub(*args, **kwargs):
    # huggingface_hub's error for a repo id when the Hub cannot be reached: two lines.
    raise OSError(
        "Got: ConnectError: [Errno -2] Name or service not known\n"
        "An error happened while trying to locate the files on the Hub. "
        "Please check your internet connection and try again."
    )


def test_a_model_the_hub_cannot_give_keeps_the_advice_on_its_line(monkeypatch):
    import huggingface_hub

    from models.codecs import snac_checkpoint
    from models.cosyvoice2.loading import resolve_folder
    from models.loader import resolve_source

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable_hub)
    monkeypatch.setattr(snac_checkpoint, "snapshot_download", unreachable_hub)
    loads = {  # --model, a CosyVoice 2 --model, Orpheus' --codec
        "owner/speech-model": (resolve_source, "pass the local folder instead"),
        "owner/cosyvoice": (resolve_folder, "pass the local folder instead"),
        "owner/snac": (snac_checkpoint.load_snac, "--local-dir DIR`) and pass DIR"),
    }
    for repo_id, (load, advice) in loads.items():
        with pytest.raises(CheckpointError) as raised:
            load(repo_id)
        line = explain(raised.value, SETTINGS)
        assert line.startswith(f"could not fetch {repo_id!r} from the Hugging Face Hub"), line
        assert "check your internet connection" in line and advice in line, line


def test_a_transcription_model_the_hub_cannot_give_keeps_the_advice_on_its_line(monkeypatch):
    faster_whisper = pytest.importorskip("faster_whisper")
    from gateway.input_transcription import InputTranscriber

    monkeypatch.setattr(faster_whisper, "WhisperModel", unreachable_hub)
    with pytest.raises(ConfigError) as raised:
        InputTranscriber("base.en")
    line = explain(raised.value, SETTINGS)
    assert line.startswith("--input-transcription-model 'base.en' could not be loaded")
    assert "Name or service not known" in line and "check your internet connection" in line
    assert "Hugging Face Hub" in line and "a folder of one" in line


def test_unreadable_weights_and_a_full_gpu_say_what_to_do():
    denied = PermissionError(errno.EACCES, "Permission denied", "/models/x/model.safetensors")
    assert "cannot read the model's files (/models/x/model.safetensors)" in explain(
        denied, SETTINGS
    )
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    line = explain(oom, SETTINGS)
    assert "GPU ran out of memory" in line and "--kv-memory-fraction" in line
    assert "--max-num-seqs" in line
    # The same failures, reported by an engine in its own process, read the same.
    child = RuntimeError("the engine process failed to start: OutOfMemoryError: CUDA out of memory")
    assert "GPU ran out of memory" in explain(child, SETTINGS)
    child = RuntimeError("the engine process failed to start: CheckpointError: bad folder x")
    assert explain(child, SETTINGS) == "bad folder x"
    assert explain(CheckpointError("no config.json in x"), SETTINGS) == "no config.json in x"
    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    assert "port 8123 on 127.0.0.1 is already in use" in explain(in_use, SETTINGS)
    # A bug is not a configuration error: it keeps its traceback.
    assert explain(KeyError("slot"), SETTINGS) is None
    assert explain(RuntimeError("shape mismatch"), SETTINGS) is None
