"""`voxgate synth` end to end, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import wave


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )


def test_synth_writes_a_wav_of_the_expected_length(tmp_path):
    out = tmp_path / "x.wav"
    result = run_cli(
        "synth", "--model", "tiny-orpheus", "--text", "Hello there.", "--out", str(out),
        "--max-tokens", "70", "--min-tokens", "70", "--seed", "1",
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        # 70 tokens = 10 SNAC frames of 2048 samples (random weights never stop early).
        assert w.getnframes() == 10 * 2048
        assert max(w.readframes(w.getnframes())) > 0  # not silence


def test_synth_reports_a_bad_model_path_clearly(tmp_path):
    result = run_cli("synth", "--model", str(tmp_path / "missing"), "--text", "Hi", "--out", str(tmp_path / "y.wav"))
    assert result.returncode == 2
    assert "error:" in result.stderr and "no checkpoint folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_synth_rejects_bad_sampling_values(tmp_path):
    result = run_cli("synth", "--text", "Hi", "--out", str(tmp_path / "z.wav"), "--temperature", "-1")
    assert result.returncode == 2 and "temperature must be in" in result.stderr
