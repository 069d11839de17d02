"""The phone-reading route: backfilled phones-NN.npz equal what `codec encode` writes, the phone
input sequence and its alignment to Flite's said phones, and a toy `speechlm --phones` run end to
end whose checkpoint loads (tokenizer "voxgate-phones") and speaks through the engine.

The serving G2P (models/voxgate_tiny/g2p.py) is another branch's: here a Flite-backed stand-in
(`t2p WORD`, stress dropped) gives each word's lexicon phones."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from models.voxgate_tiny.g2p import read_lexicon
from models.voxgate_tiny.phone_text import PHONE_SYMBOLS, PhoneTokenizer, phone_sequence, text_items
from models.voxgate_tiny.phones import PHONE_INVENTORY
from training.phone_reading import align_said
from training.phones import PHONE_ID

REPO = Path(__file__).resolve().parents[2]


def test_phone_sequence_has_word_boundaries_and_marks():
    lexicon = {"how": ("hh", "aw"), "much": ("m", "ah", "ch"), "sir": ("s", "er")}
    seq = phone_sequence("how much, sir?", lexicon.__getitem__)
    assert seq.symbols == ["hh", "aw", " ", "m", "ah", "ch", ",", " ", "s", "er", "?"]
    assert seq.word_spans == [(0, 2), (3, 6), (8, 10)]
    tok = PhoneTokenizer(word_phones=lexicon.__getitem__)
    ids = tok.encode("how much, sir?")
    assert [tok.symbols[i] for i in ids] == ["<bos>", *seq.symbols, "<audio>"]
    assert "pau" not in PHONE_SYMBOLS and len(PHONE_SYMBOLS) == 3 + 5 + len(PHONE_INVENTORY) - 1
    with pytest.raises(KeyError):
        tok.encode("how much, madam?")


def test_said_phones_align_to_the_input_monotonically():
    lexicon = {
        "the": ("dh", "ah"),
        "water's": ("w", "ao", "t", "er", "z"),
        "fine": ("f", "ay", "n"),
    }
    symbols = phone_sequence("the water's fine, the.", lexicon.__getitem__).symbols
    # Flite reduces 'the', flaps the t, drops the final 'ah' and pauses at the comma and the end
    said = ["pau", "dh", "ax", "w", "ao", "dx", "er", "z", "f", "ay", "n", "pau", "dh", "pau"]
    mapped = align_said(said, symbols)
    assert [symbols[j] for j in mapped] == [
        "dh", "dh", "ah", "w", "ao", "t", "er", "z", "f", "ay", "n", ",", "dh", ".",
    ]  # fmt: skip
    assert np.all(np.diff(mapped) >= 0)
    # an inserted phone keeps the pointer on the phone before it
    said = [
        "pau",
        "dh",
        "ah",
        "ih",
        "w",
        "ao",
        "t",
        "er",
        "z",
        "f",
        "ay",
        "n",
        "pau",
        "dh",
        "ah",
        "pau",
    ]
    mapped = align_said(said, symbols)
    assert symbols[mapped[3]] == "ah" and np.all(np.diff(mapped) >= 0)


def flite_root() -> tuple[list[str], dict[str, str]]:
    from training.teacher import flite_command, unpack_debs

    if not any((REPO / ".teacher").glob("flite_*.deb")):
        if shutil.which("flite") and shutil.which("t2p"):
            return flite_command(None)  # the system's Flite (the Makefile installs it)
        pytest.skip("no teacher: apt-get install flite, or `make teacher-debs`")
    root = Path("/tmp/voxgate-test-flite-root")
    if not (root / "usr/bin/t2p").exists():
        unpack_debs(REPO / ".teacher", root)
    return flite_command(root)


def flite_lexicon(words: set[str], path: Path) -> Path:
    """The G2P stand-in: each word's phones from Flite's `t2p` (its lexicon and letter-to-sound
    rules), stress digits and pauses dropped, written as the lexicon file format."""
    cmd, env = flite_root()
    t2p = str(Path(cmd[0]).with_name("t2p"))
    lines = []
    for word in sorted(words):
        out = subprocess.run([t2p, word], env=env, capture_output=True, text=True, check=True)
        phones = [p.rstrip("012") for p in out.stdout.split() if p != "pau"]
        lines.append(f"{word}\t{' '.join(phones)}\n")
    with gzip.open(path, "wt") as f:
        f.writelines(lines)
    return path


@pytest.fixture(scope="module")
def toy_corpus(tmp_path_factory):
    """A few teacher sentences, a toy codec, their tokens and phones-NN.npz (codec encode)."""
    from tests.training.test_phones import teacher_args, toy_codec
    from training import codec, teacher

    tmp = tmp_path_factory.mktemp("phones")
    args = teacher_args()
    teacher.main([*args, "--out", str(tmp / "teacher"), "--hours", "0.004", "--workers", "1"])
    toy_codec(tmp / "codec")
    cmd = ["encode", "--teacher", str(tmp / "teacher"), "--codec", str(tmp / "codec")]
    codec.main([*cmd, "--out", str(tmp / "tokens"), "--device", "cpu"])
    return tmp, args


def test_backfill_writes_what_encode_wrote(toy_corpus, tmp_path):
    from training import phones_backfill

    tmp, args = toy_corpus
    tokens = tmp_path / "old"
    tokens.mkdir()
    (tokens / "tokens-00.npz").write_bytes((tmp / "tokens/tokens-00.npz").read_bytes())
    phones_backfill.main(["--tokens", str(tokens), *args, "--workers", "1"])
    made, encoded = np.load(tokens / "phones-00.npz"), np.load(tmp / "tokens/phones-00.npz")
    assert made.files == encoded.files
    for key in made.files:
        np.testing.assert_array_equal(made[key], encoded[key], err_msg=key)

    # an utterance whose audio no longer matches its text's synthesis is refused, not guessed
    d = dict(np.load(tokens / "tokens-00.npz"))
    texts = json.loads(str(d["texts"]))
    texts[0] = texts[0] + " and then a great many more words than it had before."
    d["texts"] = np.array(json.dumps(texts))
    np.savez(tokens / "tokens-01.npz", **d)
    phones_backfill.main(["--tokens", str(tokens), *args, "--workers", "1"])
    refused = np.load(tokens / "phones-01.npz")
    assert refused["phone_counts"][0] == 0 and refused["phone_counts"][1:].min() > 0
    assert np.all(refused["phone_index"][: d["lengths"][0]] == -1)


def test_speechlm_reads_phones_end_to_end(toy_corpus, tmp_path):
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.outputs import Finished, SpeechRequest
    from engine.request import SamplingParams
    from models.voxgate_tiny.loading import load_voxgate_tiny
    from models.voxgate_tiny.phone_text import text_items
    from training import speechlm

    tmp, _ = toy_corpus
    texts = json.loads(str(np.load(tmp / "tokens/tokens-00.npz")["texts"]))
    words = {w for t in texts for w in text_items(t) if w not in ",.?!"}
    lexicon_path = flite_lexicon(words - {sorted(words)[0]}, tmp_path / "lexicon.tsv.gz")

    out = tmp_path / "ckpt"
    speechlm.main(
        ["--tokens", str(tmp / "tokens"), "--codec", str(tmp / "codec"), "--out", str(out)]
        + ["--phones", "--lexicon", str(lexicon_path), "--size", "toy", "--max-steps", "3"]
        + ["--batch-tokens", "2000", "--val-every", "0", "--device", "cpu"]
    )
    log = (tmp_path / "ckpt_train_log.txt").read_text()
    dropped = re.search(r"dropped: (\d+) word not in the lexicon", log)
    assert dropped and int(dropped.group(1)) >= 1  # the word left out of the lexicon
    doc = json.loads((out / "tokenizer.json").read_text())
    assert doc["type"] == "voxgate-phones" and doc["symbols"] == list(PHONE_SYMBOLS)
    config = json.loads((out / "config.json").read_text())
    assert config["text_input"] == "phones" and config["reading"] is True

    model = load_voxgate_tiny(out, torch.device("cpu"), torch.float32)
    assert isinstance(model.tokenizer, PhoneTokenizer)
    # the evaluation keeps the sentences the lexicon can say, in its place of the G2P
    from training.evaluate import sayable

    kept = sayable(model, texts, str(lexicon_path))
    assert kept and len(kept) < len(texts)  # one word was left out of the lexicon
    said = kept[0]
    rows = model.prompt_rows(said)
    assert [r[model.k] for r in rows] == model.tokenizer.encode(said)
    engine = EngineCore(
        model, EngineConfig(cuda_graphs=False, async_detok=False), torch.device("cpu"), "sdpa"
    )
    params = SamplingParams(temperature=0.7, top_k=20, seed=0, max_tokens=6)
    engine.add_request(SpeechRequest(said, None, params))
    finished = []
    while engine.has_work():
        finished += [e for e in engine.step() if isinstance(e, Finished)]
    assert len(finished) == 1 and finished[0].num_tokens >= 1


def test_training_pointer_points_at_said_phones(toy_corpus, tmp_path):
    """Frames where Flite says a phone that the lexicon also has point at that very phone."""
    from training.phone_reading import shard_inputs

    tmp, _ = toy_corpus
    d = np.load(tmp / "tokens/tokens-00.npz")
    texts = json.loads(str(d["texts"]))
    words = {w for t in texts for w in phone_sequence_words(t)}
    lexicon = read_lexicon(flite_lexicon(words, tmp_path / "lexicon.tsv.gz"))
    tok = PhoneTokenizer(word_phones=lexicon.__getitem__)
    skipped: dict[str, int] = {}
    inputs = shard_inputs(tmp / "tokens/tokens-00.npz", d["lengths"], texts, tok, lexicon, skipped)
    phones = np.load(tmp / "tokens/phones-00.npz")
    agree = total = 0
    for u, item in enumerate(inputs):
        assert item is not None
        ids, pointer = item
        assert np.all(np.diff(pointer) >= 0) and pointer.min() >= 0
        assert pointer.max() < len(ids) - 2
        said = phones["phones"][phones["phone_offsets"][u] :][: phones["phone_counts"][u]]
        start = int(d["offsets"][u])
        index = phones["phone_index"][start : start + d["lengths"][u]]
        for f, p in enumerate(index):
            if said[p] != PHONE_ID["pau"]:
                total += 1
                agree += tok.symbols[ids[1 + pointer[f]]] == PHONE_INVENTORY[said[p]]
    assert skipped == {} and agree >= 0.9 * total


def phone_sequence_words(text: str) -> list[str]:
    from models.voxgate_tiny.phone_text import MARKS, text_items

    return [w for w in text_items(text) if w not in MARKS]


def test_tokenizer_json_type_picks_the_tokenizer(tmp_path):
    from models.checkpoint_errors import CheckpointError
    from models.voxgate_tiny.text import CharTokenizer, load_tokenizer

    CharTokenizer().save(tmp_path)
    assert load_tokenizer(tmp_path) == CharTokenizer()
    PhoneTokenizer().save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, PhoneTokenizer) and loaded.symbols == PHONE_SYMBOLS
    with pytest.raises(CheckpointError, match="not a 'voxgate-chars'"):
        CharTokenizer.load(tmp_path)
    doc = json.loads((tmp_path / "tokenizer.json").read_text())
    (tmp_path / "tokenizer.json").write_text(json.dumps({**doc, "type": "voxgate-bytes"}))
    with pytest.raises(CheckpointError, match="'voxgate-chars' or 'voxgate-phones'"):
        load_tokenizer(tmp_path)


def test_speechlm_grows_its_training_set_from_finished_feed_folders(toy_corpus, tmp_path):
    """`--grow`: folders finished while the run goes on join the training set once each;
    a folder still being written (NAME.tmp) does not."""
    from training import speechlm

    tmp, _ = toy_corpus
    texts = json.loads(str(np.load(tmp / "tokens/tokens-00.npz")["texts"]))
    words = {w for t in texts for w in text_items(t) if w not in ",.?!"}
    lexicon_path = flite_lexicon(words, tmp_path / "lexicon.tsv.gz")
    grow = tmp_path / "grow"
    for name in ("00", "01.tmp"):
        shutil.copytree(tmp / "tokens", grow / name)
    out = tmp_path / "ckpt"
    speechlm.main(
        ["--tokens", str(tmp / "tokens"), "--codec", str(tmp / "codec"), "--out", str(out)]
        + ["--phones", "--lexicon", str(lexicon_path), "--size", "toy", "--max-steps", "8"]
        + ["--batch-tokens", "2000", "--val-every", "0", "--device", "cpu", "--sanity", "0"]
        + ["--grow", str(grow)]
    )
    grown = re.findall(
        r"grow: \+(\d+) utterances from (\S+) at step",
        (tmp_path / "ckpt_train_log.txt").read_text(),
    )
    assert [name for _, name in grown] == ["00"]
    assert int(grown[0][0]) == len(texts)
