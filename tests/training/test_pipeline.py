"""The training recipe end to end at toy scale: teacher speech (Flite) → codec training →
codec tokens → SpeechLM training → the exported checkpoint loads through the registry and
speaks through the engine. Each stage is the same command the GPU runs, with tiny budgets."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from training.judge import edit_distance, word_error_rate, words

REPO = Path(__file__).resolve().parents[2]


def teacher_args() -> list[str]:
    debs = REPO / ".teacher"
    if any(debs.glob("flite_*.deb")):
        return ["--debs", str(debs)]
    if shutil.which("flite"):
        return []
    pytest.skip("no teacher: apt-get install flite, or `make teacher-debs`")


def test_word_error_rate_normalises_before_counting():
    assert words("Dr. Smith paid $3.") == ["doctor", "smith", "paid", "three", "dollars"]
    assert edit_distance(["a", "b", "c"], ["a", "x", "c", "d"]) == 2
    assert word_error_rate(["It costs 3 dollars."], ["it costs three dollars"]) == 0.0
    assert word_error_rate(["one two three four"], ["one two four"]) == 0.25


def test_toy_pipeline_end_to_end(tmp_path):
    from models.registry import load_model
    from training import codec, teacher

    args = teacher_args()
    teacher.main([*args, "--out", str(tmp_path / "teacher"), "--hours", "0.004", "--workers", "2"])
    codec.main(
        [
            "train",
            "--teacher",
            str(tmp_path / "teacher"),
            "--out",
            str(tmp_path / "codec"),
            "--config",
            "toy",
            "--max-steps",
            "3",
            "--batch",
            "2",
            "--crop-frames",
            "16",
            "--device",
            "cpu",
        ]
    )
    codec.main(
        [
            "encode",
            "--teacher",
            str(tmp_path / "teacher"),
            "--codec",
            str(tmp_path / "codec"),
            "--out",
            str(tmp_path / "tokens"),
            "--device",
            "cpu",
        ]
    )
    tokens = np.load(next((tmp_path / "tokens").glob("tokens-*.npz")))
    assert tokens["codes"].shape[1] == 4 and tokens["lengths"].sum() == len(tokens["codes"])
    train_lm(tmp_path, "ckpt", "--size", "toy", "--max-steps", "3", "--warmup", "2")
    model = load_model(str(tmp_path / "ckpt"))
    assert model.facts.sample_rate == 24000 and model.facts.token_rate_hz == 25

    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.outputs import AudioChunk, SpeechRequest
    from engine.request import SamplingParams

    core = EngineCore(model, EngineConfig(num_kv_blocks=64), torch.device("cpu"), "sdpa")
    request = core.add_request(
        SpeechRequest("Hello there.", None, SamplingParams(max_tokens=6, seed=0))
    )
    samples = 0
    while core.has_work():
        samples += sum(len(e.pcm) for e in core.step() if isinstance(e, AudioChunk))
    assert samples == 2 * 480 * len([r for r in request.output_ids if not model.is_stop(r)]) > 0

    # Stage 2c and the reading column: --reading refuses tokens without alignments, then the
    # aligner aligns them and the model trained with them feeds its reading positions back.
    with pytest.raises(SystemExit, match="training.aligner align"):
        train_lm(tmp_path, "reading", "--size", "toy", "--max-steps", "1", "--reading")
    from training import aligner

    tok = str(tmp_path / "tokens")
    aligner.main(
        [
            "train",
            "--tokens",
            tok,
            "--out",
            str(tmp_path / "aligner"),
            "--size",
            "toy",
            "--max-steps",
            "3",
            "--warmup",
            "1",
            "--batch-frames",
            "2000",
            "--device",
            "cpu",
        ]
    )
    aligner.main(
        ["align", "--tokens", tok, "--aligner", str(tmp_path / "aligner"), "--device", "cpu"]
    )
    train_lm(tmp_path, "reading", "--size", "toy", "--max-steps", "3", "--warmup", "2", "--reading")
    reader = load_model(str(tmp_path / "reading"))
    assert reader.lm.reading
    core = EngineCore(reader, EngineConfig(num_kv_blocks=64), torch.device("cpu"), "sdpa")
    request = core.add_request(
        SpeechRequest("Hello there.", None, SamplingParams(max_tokens=4, min_tokens=4, seed=0))
    )
    while core.has_work():
        core.step()
    # Every row points into the text, walking forward, and carries the character it points at.
    k, chars = reader.k, reader.tokenizer.encode("hello there.")[1:-1]
    pointers = [row[k + 2] for row in request.output_ids]
    assert pointers == sorted(pointers) and pointers[0] >= 0 and pointers[-1] < len(chars)
    assert all(row[k] == reader.lm.text_vocab + chars[row[k + 2]] for row in request.output_ids)

    # Stage 3 again, fine-tuning the checkpoint just written (`--init`): it starts from those
    # weights (one step at a tiny learning rate moves them only slightly) and writes a
    # checkpoint the loader reads.
    train_lm(
        tmp_path,
        "tuned",
        "--init",
        str(tmp_path / "ckpt"),
        "--max-steps",
        "1",
        "--warmup",
        "1",
        "--lr",
        "1e-6",
    )
    tuned = load_model(str(tmp_path / "tuned"))
    before = dict(model.lm.named_parameters())
    after = dict(tuned.lm.named_parameters())
    assert before.keys() == after.keys()
    drift = max((after[k].float() - before[k].float()).abs().max().item() for k in before)
    assert 0 < drift < 1e-2


def train_lm(tmp_path, out: str, *args: str) -> None:
    """Stage 3 on the toy corpus and codec under tmp_path, writing checkpoint tmp_path/out."""
    from training import speechlm

    tokens, codec = str(tmp_path / "tokens"), str(tmp_path / "codec")
    speechlm.main(
        [
            "--tokens",
            tokens,
            "--codec",
            codec,
            "--out",
            str(tmp_path / out),
            *args,
            "--batch-tokens",
            "2000",
            "--device",
            "cpu",
        ]
    )
