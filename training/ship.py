"""Stage 5: ship a trained checkpoint as the `voxgate-tiny` preset — copy it into
models/voxgate_tiny/weights/ and write its model card from the training log and the judge's
report.

    python -m training.ship --model W/voxgate-tiny --train-log W/voxgate-tiny_train_log.txt \\
        --eval eval.json --codec-log W/codec/train_log.txt --ttfa-ms 104-190 --streams 4

It loads the checkpoint through the real loader first, and refuses (with the reason) a folder
over the repository's budget (each file < 16 MiB, ≤ 60 MB in all), a judge's report without
the teacher's and the codec's WER or on fewer than 50 sentences, and a model whose WER misses
the target (≤ 15 % and ≤ 1.5 × the teacher's) unless `--below-target` says to ship it anyway.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import torch

from models.voxgate_tiny.loading import SHIPPED_WEIGHTS, load_voxgate_tiny

TEMPLATE = Path(__file__).resolve().parents[1] / "models/voxgate_tiny/MODEL_CARD.template.md"
MAX_FILE_BYTES = 16 * 2**20
MAX_TOTAL_BYTES = 60 * 10**6
MIN_SENTENCES = 50
WER_TARGET, TEACHER_RATIO = 0.15, 1.5


class ShipError(SystemExit):
    """What keeps the checkpoint from shipping, said to the user."""


def _search(pattern: str, text: str, what: str, source: Path) -> re.Match:
    matches = list(re.finditer(pattern, text, re.MULTILINE))
    found = matches[-1] if matches else None  # the last: a log may go on after a restart
    if found is None:
        raise ShipError(f"{source} has no {what} line: is it the right log?")
    return found


def run_section(log: Path, size: str | None) -> str:
    """The log's text for one run: training/gpu_call7.sh's log holds one section a size
    (`=== size NAME`); a plain training.speechlm log is one run."""
    text = log.read_text()
    sections = dict(re.findall(r"^=== size (\S+)\n(.*?)(?=^=== size |\Z)", text, re.M | re.S))
    if not sections:
        return text
    if size is None and len(sections) == 1:
        return next(iter(sections.values()))
    if size not in sections:
        raise ShipError(f"{log} holds the runs {', '.join(sections)}: say which with --size")
    return sections[size]


def training_facts(log: Path, size: str | None = None) -> dict[str, str]:
    """Hours, sentences, steps, time and held-out loss from a training.speechlm log."""
    text = run_section(log, size)
    start = _search(r"^speechlm: (\d+) utterances \(([\d.]+) h\)", text, "speechlm:", log)
    grown = re.findall(r"^grow: \+(\d+) utterances .* training set ([\d.]+) h$", text, re.M)
    done = _search(
        r"^done: (\d+) steps, (\d+) epochs, (\d+)s; kept step \d+, held-out loss (.*)$",
        text,
        "done:",
        log,
    )
    loss = dict(zip(*[iter(done.group(4).split())] * 2, strict=True))
    return {
        "utterances": f"{int(start.group(1)) + sum(int(n) for n, _ in grown):,}",
        "hours": grown[-1][1] if grown else start.group(2),
        "lm_steps": f"{int(done.group(1)):,}",
        "lm_epochs": done.group(2),
        "lm_s": done.group(3),
        "cb0": loss["cb0"],
        "cb13": "/".join(loss[f"cb{j}"] for j in (1, 2, 3)),
    }


def codec_facts(log: Path) -> dict[str, str]:
    text = log.read_text()
    saved = _search(r"codec saved to .* after (\d+) steps", text, "codec saved", log)
    last = _search(r"^step \d+ t (\d+)s .* mel ([\d.]+)", text, "step", log)
    return {
        "codec_steps": f"{int(saved.group(1)):,}",
        "codec_s": last.group(1),
        "codec_mel": last.group(2),
    }


def judged(report: dict) -> tuple[dict, dict, dict]:
    """The report's teacher, codec-resynthesis and model entries (training.evaluate names)."""
    systems = report.get("systems", {})
    teacher = next((v for k, v in systems.items() if k.startswith("teacher")), None)
    codec = systems.get("codec resynthesis")
    model = next((v for k, v in systems.items() if k.startswith("model")), None)
    if teacher is None or codec is None or model is None:
        raise ShipError(
            "the judge's report needs the teacher's, the codec's and the model's WER: run "
            "`python -m training.evaluate` without --model-only"
        )
    return teacher, codec, model


def judge_facts(report: dict) -> dict[str, str]:
    teacher, codec, model = judged(report)
    count = len(report["sentences"])
    if count < MIN_SENTENCES:
        raise ShipError(f"the report judged {count} sentences; the card needs >= {MIN_SENTENCES}")
    return {
        "count": str(count),
        "count_minus_1": str(count - 1),
        "wer_teacher": f"{100 * teacher['wer']:.1f}",
        "wer_codec": f"{100 * codec['wer']:.1f}",
        "wer_model": f"{100 * model['wer']:.1f}",
    }


def meets_target(report: dict) -> tuple[bool, str]:
    teacher, _, model = judged(report)
    limit = min(WER_TARGET, TEACHER_RATIO * teacher["wer"])
    wer = model["wer"]
    return wer <= limit, f"model WER {100 * wer:.1f} % against a limit of {100 * limit:.1f} %"


def stored_dtypes(folder: Path) -> str:
    """The precision the checkpoint's tensors are stored in ("bfloat16", or several joined
    with " + "), for the card: the loader upcasts them to the serving dtype either way."""
    from models.loader import iter_safetensors

    dtypes = sorted({str(t.dtype).removeprefix("torch.") for _, t in iter_safetensors(folder)})
    return " + ".join(dtypes)


def checkpoint_facts(folder: Path) -> dict[str, str]:
    """Architecture and sizes, from the checkpoint as the engine loads it."""
    model = load_voxgate_tiny(folder, torch.device("cpu"), torch.float32)
    lm, codec = model.lm, model.detok.codec
    files = [f for f in folder.iterdir() if f.is_file()]
    too_big = [f.name for f in files if f.stat().st_size >= MAX_FILE_BYTES]
    total = sum(f.stat().st_size for f in files)
    if too_big:
        raise ShipError(f"files of 16 MiB or more ({', '.join(too_big)}): re-export in shards")
    if total > MAX_TOTAL_BYTES:
        raise ShipError(f"{total / 1e6:.1f} MB in all: the repository's budget is 60 MB")
    config = json.loads((folder / "config.json").read_text())
    decoder = sum(p.numel() for n, p in codec.named_parameters() if not n.startswith("enc"))
    sampling = config.get("sampling", {})
    return {
        "reads": "phone-reading" if config.get("text_input") == "phones" else "character-level",
        "layers": str(config["num_hidden_layers"]),
        "hidden": str(config["hidden_size"]),
        "heads": str(config["num_attention_heads"]),
        "kv_heads": str(config["num_key_value_heads"]),
        "lm_params": f"{sum(p.numel() for p in lm.parameters()) / 1e6:.1f}",
        "codec_params": f"{sum(p.numel() for p in codec.parameters()) / 1e6:.1f}",
        "decoder_params": f"{decoder / 1e6:.1f}",
        "size_mb": f"{total / 1e6:.1f}",
        "weights_dtype": stored_dtypes(folder),
        "temperature": str(sampling.get("temperature", "")),
        "top_k": str(sampling.get("top_k", "")),
    }


def model_card(facts: dict[str, str]) -> str:
    card = TEMPLATE.read_text()
    card = re.sub(r"<!--.*?-->\n\n", "", card, flags=re.S)  # the template's own instructions
    missing = sorted(set(re.findall(r"\{(\w+)\}", card)) - facts.keys())
    if missing:
        raise ShipError(f"no value for the model card's {', '.join(missing)}")
    return card.format(**facts)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", required=True, help="checkpoint folder (training.speechlm --out)")
    p.add_argument("--train-log", required=True, help="its training.speechlm log")
    p.add_argument("--size", help="with gpu_call7.sh's log of several sizes: the shipped one's")
    p.add_argument("--eval", required=True, help="training.evaluate --out JSON")
    p.add_argument("--codec-log", required=True, help="training.codec train's train_log.txt")
    p.add_argument("--ttfa-ms", required=True, help="one CPU session's first audio (BENCHMARKS)")
    p.add_argument("--streams", required=True, help="real-time CPU streams (BENCHMARKS)")
    p.add_argument("--synth", default="see training/README.md", help="teacher synthesis time")
    p.add_argument("--dest", default=str(SHIPPED_WEIGHTS), help="where the preset's weights go")
    p.add_argument(
        "--below-target", action="store_true", help="ship although the WER misses the target"
    )
    args = p.parse_args(argv)

    source, dest = Path(args.model), Path(args.dest)
    report = json.loads(Path(args.eval).read_text())
    facts = {
        **checkpoint_facts(source),
        **training_facts(Path(args.train_log), args.size),
        **codec_facts(Path(args.codec_log)),
        **judge_facts(report),
        "ttfa_ms": args.ttfa_ms,
        "streams": args.streams,
        "synth": args.synth,
    }
    ok, why = meets_target(report)
    if not ok and not args.below_target:
        raise ShipError(f"not shipped: {why} (--below-target ships it anyway)")
    card = model_card(facts)
    if dest.exists():
        shutil.rmtree(dest)
    # Contents only, not modes: a folder fetched from the GPU machine is read-only, and the
    # next ship (or a git checkout over it) must be able to replace it.
    shutil.copytree(source, dest, copy_function=shutil.copyfile)
    dest.chmod(0o755)
    (dest / "MODEL_CARD.md").write_text(card)
    print(f"shipped {source} to {dest} ({facts['size_mb']} MB; {why}); commit that folder")


if __name__ == "__main__":
    main()
