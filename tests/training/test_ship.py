"""Stage 5 (training/ship.py): a checkpoint, its training log and the judge's report become the
preset's weights folder with a filled-in model card, or a clear refusal."""

from __future__ import annotations

import json
import stat

import pytest
import torch

from models.codecs.voxcodec import VoxCodecConfig
from models.voxgate_tiny.checkpoint import write_random_checkpoint
from models.voxgate_tiny.config import tiny_config_dict
from models.voxgate_tiny.loading import load_voxgate_tiny
from models.voxgate_tiny.phone_text import PhoneTokenizer
from training import ship

TRAIN_LOG = """=== size default
speechlm: 1000 utterances (1.50 h), 1.0M params, device cuda
done: 10 steps, 1 epochs, 9s; kept step 10, held-out loss cb0 5.000 cb1 5.000 cb2 5.000 cb3 5.000 read 1.000
=== size toy
speechlm: 1000 utterances (1.50 h), 1.0M params, device cuda
grow: +500 utterances from 00 at step 4; training set 2.25 h
grow: +400 utterances from 01 at step 8; training set 2.85 h
done: 12 steps, 2 epochs, 11s; kept step 12, held-out loss cb0 2.125 cb1 2.250 cb2 2.375 cb3 2.500 read 0.250
"""
CODEC_LOG = """codec: 10.01 h of teacher audio, 12974 utterances, device cuda
step 100 t 5s lr 9.99e-04 mel 1.457 stft 2.136 sc 0.718
step 200 t 9s lr 9.99e-04 mel 0.875 stft 2.136 sc 0.718
codec saved to /root/out/codec after 200 steps
"""


def report(teacher: float, model: float, count: int = 50, model_only: bool = False) -> dict:
    systems = (
        {}
        if model_only
        else {
            "teacher (flite slt)": {"wer": teacher},
            "codec resynthesis": {"wer": teacher + 0.01},
        }
    )
    systems["model (voxgate-tiny)"] = {"wer": model}
    return {"sentences": ["A sentence."] * count, "systems": systems}


@pytest.fixture
def inputs(tmp_path):
    config = tiny_config_dict(
        VoxCodecConfig(),
        PhoneTokenizer().vocab_size,
        hidden=64,
        layers=2,
        heads=2,
        intermediate=128,
        depth_intermediate=64,
        reading=True,
        text_input="phones",
    )
    write_random_checkpoint(tmp_path / "ckpt", config, seed=3, tokenizer=PhoneTokenizer())
    (tmp_path / "train.log").write_text(TRAIN_LOG)
    (tmp_path / "codec.log").write_text(CODEC_LOG)
    return tmp_path


def args(tmp, eval_name: str, *extra: str) -> list[str]:
    return [
        "--model",
        str(tmp / "ckpt"),
        "--train-log",
        str(tmp / "train.log"),
        "--size",
        "toy",
        "--eval",
        str(tmp / eval_name),
        "--codec-log",
        str(tmp / "codec.log"),
        "--ttfa-ms",
        "150",
        "--streams",
        "4",
        "--dest",
        str(tmp / "shipped"),
        *extra,
    ]


def test_a_checkpoint_that_meets_the_target_ships_with_its_card(inputs):
    (inputs / "eval.json").write_text(json.dumps(report(0.10, 0.12, count=60)))
    for path in [*(inputs / "ckpt").iterdir(), inputs / "ckpt"]:
        path.chmod(0o500 if path.is_dir() else 0o400)  # as fetched from the GPU machine
    ship.main(args(inputs, "eval.json"))
    ship.main(args(inputs, "eval.json"))  # shipping again replaces the copy
    shipped = inputs / "shipped"
    # Mode bits, not os.access: root (CI) may write to anything.
    assert all(p.stat().st_mode & stat.S_IWUSR for p in [shipped, *shipped.iterdir()])
    model = load_voxgate_tiny(shipped, torch.device("cpu"), torch.float32)
    assert isinstance(model.tokenizer, PhoneTokenizer)
    card = (shipped / "MODEL_CARD.md").read_text()
    assert "{" not in card and "<!--" not in card
    assert "phone-reading Llama backbone (2 layers, width 64" in card
    assert "| weights | float32 safetensors" in card  # as written, not a fixed claim
    assert "2.85 hours (1,900 sentences)" in card  # the toy run's, grown, not the default's
    assert "12 steps (2 epochs) | held-out CE cb0 2.125 / cb1–3 2.250/2.375/2.500" in card
    assert "200 steps | mel L1 0.875" in card
    assert "| teacher (Flite slt) | 10.0 % |" in card and "(seeds 0…59) | 12.0 % |" in card


def test_a_checkpoint_short_of_the_target_or_an_incomplete_report_is_refused(inputs):
    (inputs / "eval.json").write_text(json.dumps(report(0.10, 0.36)))
    with pytest.raises(SystemExit, match="not shipped: model WER 36.0 % against a limit of 15.0 %"):
        ship.main(args(inputs, "eval.json"))
    assert not (inputs / "shipped").exists()
    ship.main(args(inputs, "eval.json", "--below-target"))  # said on purpose: it ships
    assert (inputs / "shipped" / "MODEL_CARD.md").exists()

    (inputs / "only.json").write_text(json.dumps(report(0.10, 0.12, model_only=True)))
    with pytest.raises(SystemExit, match="without --model-only"):
        ship.main(args(inputs, "only.json"))
    (inputs / "few.json").write_text(json.dumps(report(0.10, 0.12, count=20)))
    with pytest.raises(SystemExit, match="judged 20 sentences"):
        ship.main(args(inputs, "few.json"))
    with pytest.raises(SystemExit, match="say which with --size"):
        ship.main([a for a in args(inputs, "eval.json") if a not in ("--size", "toy")])
