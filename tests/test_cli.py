"""`voxgate synth` end to end, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import wave

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )


def refused_before_loading(monkeypatch, capsys, *args: str) -> str:
    """`voxgate synth *args` through the command's main() in this process, with loading a
    model made an error: it must exit with status 2 before any load; returns its stderr. For
    the checks made before loading, which need no Python of their own (one spends seconds
    importing torch); an exception other than the one-line refusal fails the test."""
    from engine import factory
    from gateway.cli import main

    def no_load(*_args, **_kwargs):
        raise AssertionError("synth loaded a model before refusing")

    monkeypatch.setattr(factory, "build_engine", no_load)
    assert main(["synth", *args]) == 2
    return capsys.readouterr().err


def test_synth_writes_a_wav_of_the_expected_length(tmp_path):
    out = tmp_path / "x.wav"
    result = run_cli(
        "synth",
        "--model",
        "tiny-orpheus",
        "--text",
        "Hello there.",
        "--out",
        str(out),
        "--max-tokens",
        "70",
        "--min-tokens",
        "70",
        "--seed",
        "1",
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        # 70 tokens = 10 SNAC frames of 2048 samples (random weights never stop early).
        assert w.getnframes() == 10 * 2048
        assert max(w.readframes(w.getnframes())) > 0  # not silence


def test_synth_at_speed_writes_the_stretched_length(tmp_path):
    """--speed 2: the same 70 tokens said in half the time (pitch kept: gateway/time_stretch.py)."""
    out = tmp_path / "fast.wav"
    common = ("--model", "tiny-orpheus", "--text", "Hello there.", "--out", str(out))
    tokens = ("--max-tokens", "70", "--min-tokens", "70", "--seed", "1")
    result = run_cli("synth", *common, *tokens, "--speed", "2")
    assert result.returncode == 0, result.stderr
    assert "at speed 2" in result.stdout
    with wave.open(str(out)) as w:
        assert w.getframerate() == 24000 and w.getnframes() == 10 * 2048 // 2
        assert max(w.readframes(w.getnframes())) > 0  # not silence


@pytest.mark.parametrize("speed", ["5", "0.1", "nan"])
def test_synth_refuses_a_speed_out_of_range_before_loading(tmp_path, monkeypatch, capsys, speed):
    out = tmp_path / "s.wav"
    err = refused_before_loading(
        monkeypatch, capsys, "--text", "Hi", "--out", str(out), "--speed", speed
    )
    assert "error: `--speed` must be" in err and "0.25, 4.0" in err
    assert not out.exists()


def test_synth_reports_a_bad_model_path_clearly(tmp_path):
    result = run_cli(
        "synth",
        "--model",
        str(tmp_path / "missing"),
        "--text",
        "Hi",
        "--out",
        str(tmp_path / "y.wav"),
    )
    assert result.returncode == 2
    assert "error:" in result.stderr and "no checkpoint folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_synth_rejects_bad_sampling_values_before_loading(tmp_path, monkeypatch, capsys):
    out = str(tmp_path / "z.wav")
    err = refused_before_loading(
        monkeypatch, capsys, "--text", "Hi", "--out", out, "--temperature", "-1"
    )
    assert "temperature must be in" in err


def test_synth_checks_its_options_as_the_endpoints_do(tmp_path):
    """max_tokens beyond the model's context and a voice the model lacks: one line each, as
    session.start and POST /v1/audio/speech refuse them (gateway/speech_options.py)."""
    out = str(tmp_path / "z.wav")
    long = run_cli("synth", "--text", "Hi", "--out", out, "--max-tokens", "100000000")
    assert long.returncode == 2 and "below voxgate-tiny's context" in long.stderr
    voice = run_cli("synth", "--text", "Hi", "--out", out, "--voice", "nobody")
    assert voice.returncode == 2 and "voice 'nobody' is not one of voxgate-tiny's" in voice.stderr
    assert "Traceback" not in long.stderr + voice.stderr


def test_synth_says_every_sentence_of_a_paragraph_with_the_default_voice(tmp_path):
    """voxgate-tiny learned single sentences and ends its audio at a sentence's final mark: a
    paragraph is cut into sentences as the gateway cuts it, and every one is said."""
    import importlib.util

    import numpy as np
    import pytest

    from models.voxgate_tiny.loading import SHIPPED_WEIGHTS

    if not (SHIPPED_WEIGHTS / "config.json").exists():
        pytest.skip("voxgate-tiny weights not shipped (training/README.md)")
    if importlib.util.find_spec("faster_whisper") is None:
        pytest.skip("judge not installed: pip install -e '.[dev]'")
    from training.judge import WhisperJudge, words

    sentences = [
        "Can you call Jenny tomorrow?",
        "The frog studied near the attic.",
        "Please fix the early backpack at noon.",
    ]
    text = " ".join(sentences)
    out = tmp_path / "p.wav"
    result = run_cli("synth", "--text", text, "--out", str(out), "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert "3 sentence segment(s)" in result.stdout and "finish=stop" in result.stdout
    with wave.open(str(out)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        heard = WhisperJudge(threads=2).transcribe(pcm, w.getframerate())
    # Every sentence is there: most of its words are heard. (One request for the whole
    # paragraph said the first sentence only.) Not a WER bound: the segments are batched as
    # they happen to arrive, so the audio varies from run to run (WER 0-22 % seen).
    heard_words = set(words(heard))
    for sentence in sentences:
        said = words(sentence)
        assert sum(w in heard_words for w in said) >= len(said) / 2, (sentence, heard)


def test_synth_with_a_seed_repeats_itself(tmp_path):
    """--seed: the same text gives the same audio, to the rounding of the codec's chunks (its
    sentences then go one after another, not batched as they happen to arrive)."""
    import numpy as np

    text = "Hello there, my friend. How are you doing today?"
    clips = []
    for name in ("a.wav", "b.wav"):
        result = run_cli(
            "synth",
            "--model",
            "tiny-orpheus",
            "--text",
            text,
            "--out",
            str(tmp_path / name),
            "--max-tokens",
            "84",
            "--seed",
            "5",
        )
        assert result.returncode == 0, result.stderr
        assert "2 sentence segment(s)" in result.stdout
        with wave.open(str(tmp_path / name)) as w:
            clips.append(np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(int))
    assert len(clips[0]) == len(clips[1]) > 0
    assert np.abs(clips[0] - clips[1]).max() <= 1


def test_synth_takes_the_models_own_options(tmp_path):
    """--model-option reaches Chatterbox (exaggeration)."""
    out = tmp_path / "c.wav"
    common = ("synth", "--model", "tiny-chatterbox", "--text", "Hi there.", "--out", str(out))
    result = run_cli(*common, "--model-option", "exaggeration=0.9", "--max-tokens", "12")
    assert result.returncode == 0, result.stderr
    assert out.exists()


def test_synth_refuses_a_bad_model_option_before_loading(tmp_path, monkeypatch, capsys):
    """A model option out of its family's range, or malformed: one line naming it, before
    the model loads."""
    common = ("--model", "tiny-chatterbox", "--text", "Hi there.", "--out", str(tmp_path / "c.wav"))
    err = refused_before_loading(monkeypatch, capsys, *common, "--model-option", "cfg_weight=4")
    assert "model_options.cfg_weight must be in [0.0, 1.0]" in err
    err = refused_before_loading(monkeypatch, capsys, *common, "--model-option", "exaggeration")
    assert "give NAME=NUMBER" in err


def test_synth_reads_text_options_as_text_and_checks_them_before_loading(
    tmp_path, monkeypatch, capsys
):
    """A text option (Qwen3-TTS' language) is taken as written and checked against the
    family's choices before the model loads; a number option's value must read as a number."""
    from gateway.synth import parse_model_options, typed_model_options
    from models.qwen3_tts.family import Qwen3TtsRequestOptions
    from models.request_options import option_specs

    out = tmp_path / "q.wav"
    common = ("--model", "tiny-qwen3-tts", "--text", "Hi there.", "--out", str(out))
    err = refused_before_loading(monkeypatch, capsys, *common, "--model-option", "language=klingon")
    assert "model_options.language must be one of auto, chinese, english" in err
    assert not out.exists()
    raw = parse_model_options(["language=English", "instruction=Slowly, = calmly.", "pace=2"])
    assert raw == {"language": "English", "instruction": "Slowly, = calmly.", "pace": "2"}
    specs = option_specs(Qwen3TtsRequestOptions)
    assert typed_model_options(raw, specs)["instruction"] == "Slowly, = calmly."
    from models.chatterbox.family import ChatterboxRequestOptions

    numbers = option_specs(ChatterboxRequestOptions)
    assert typed_model_options({"exaggeration": "0.7"}, numbers) == {"exaggeration": 0.7}
    with pytest.raises(ValueError, match="exaggeration is a number"):
        typed_model_options({"exaggeration": "loud"}, numbers)


def test_synth_help_says_what_each_option_takes(capsys):
    """`voxgate synth --help` reads on its own: what the command does, the default model, and
    a line for every option (none left as a bare metavar)."""
    from gateway.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["synth", "--help"])
    text = capsys.readouterr().out
    assert "Synthesize text to a WAV file" in text and "default: voxgate-tiny" in text
    for option in ("--voice", "--max-tokens", "--min-tokens"):
        line = text[text.index(f"  {option} ") :].splitlines()[0]
        assert len(line.split()) > 2, f"{option} has no help: {line!r}"
