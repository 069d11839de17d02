"""The CTC aligner: Viterbi forced alignment on hand-built and brute-forced log-probs, a toy
corpus whose true character durations are known (train briefly on the CPU, align, compare
boundaries), and the align CLI's on-disk format."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from models.voxgate_tiny.text import CharTokenizer
from tests.torch_threads import one_torch_thread
from training import aligner
from training.codec import write_tokens
from training.ctc_viterbi import forced_align, greedy_decode, min_frames

BLANK = 0


def log_probs_for(labels: list[int], classes: int, sure: float = 0.9) -> torch.Tensor:
    """[T, C] log-probs that put `sure` on each frame's label and share the rest."""
    p = torch.full((len(labels), classes), (1 - sure) / (classes - 1))
    p[torch.arange(len(labels)), torch.tensor(labels)] = sure
    return p.log()


def test_viterbi_recovers_a_known_path_with_repeats_and_edge_blanks():
    # chars a a b (ids 5 5 7): the two a's must be split by a blank frame
    frames = [BLANK, BLANK, 5, 5, BLANK, 5, 7, 7, BLANK, BLANK]
    expected = [0, 0, 0, 0, 0, 1, 2, 2, 2, 2]
    short = [7, BLANK, 9]  # a second, shorter utterance in the same batch (padding)
    lp = torch.full((2, len(frames), 10), -50.0)
    lp[0] = log_probs_for(frames, 10)
    lp[1, :3] = log_probs_for(short, 10)
    result = forced_align(
        lp, torch.tensor([10, 3]), torch.tensor([[5, 5, 7], [7, 9, 0]]), torch.tensor([3, 2])
    )
    assert result.char_index[0].tolist() == expected
    assert result.char_index[1].tolist() == [0, 0, 1] + [0] * 7
    path_lp = lp[0, torch.arange(10), torch.tensor(frames)].mean()
    assert result.score[0].item() == pytest.approx(path_lp.item(), abs=1e-5)
    assert min_frames([5, 5, 7]) == 4


def test_viterbi_matches_brute_force_over_all_frame_labelings():
    torch.manual_seed(0)
    target, t, classes = [1, 2, 2], 6, 3
    lp = torch.randn(t, classes).log_softmax(-1)
    best, best_score = None, -float("inf")
    for labels in itertools.product(range(classes), repeat=t):
        collapsed = [
            c for i, c in enumerate(labels) if c != BLANK and (i == 0 or labels[i - 1] != c)
        ]
        if collapsed == target:
            score = lp[torch.arange(t), torch.tensor(labels)].sum().item()
            if score > best_score:
                best, best_score = labels, score
    result = forced_align(lp[None], torch.tensor([t]), torch.tensor([target]), torch.tensor([3]))
    seen, expected = -1, []
    for i, c in enumerate(best):  # the brute-force path's character index per frame
        if c != BLANK and (i == 0 or best[i - 1] != c):
            seen += 1
        expected.append(max(seen, 0))
    assert result.char_index[0].tolist() == expected
    assert result.score[0].item() == pytest.approx(best_score / t, abs=1e-5)


def test_viterbi_spreads_an_unalignable_utterance_and_flags_it():
    lp = log_probs_for([1, 1, 1], 4)[None]
    result = forced_align(lp, torch.tensor([3]), torch.tensor([[1, 1, 2]]), torch.tensor([3]))
    assert result.score[0].item() == -float("inf")  # 1 1 2 needs 4 frames
    assert result.char_index[0].tolist() == [0, 1, 2]


def test_greedy_decode_merges_repeats_and_drops_blanks():
    lp = log_probs_for([0, 5, 5, 0, 5, 7, 0], 10)[None]
    assert greedy_decode(lp, torch.tensor([7])) == [[5, 5, 7]]


def toy_corpus(rng: np.random.Generator, count: int):
    """Utterances of 4-8 letters; each letter is a fixed random code pattern held for 2-6
    frames, with silence frames (their own pattern) at the edges, sometimes between letters and
    always between equal letters. 5 % of the codes are replaced by noise. Returns the codes,
    texts and the true first frame of each character."""
    letters = "abcdefgh"
    pattern = {c: rng.integers(0, 1000, 4) for c in letters + " "}
    silence = rng.integers(0, 1000, 4)
    codes, texts, starts = [], [], []
    for _ in range(count):
        text = "".join(rng.choice(list(letters), rng.integers(4, 9)))
        frames, first = [silence] * int(rng.integers(1, 4)), []
        for i, c in enumerate(text):
            if i and (c == text[i - 1] or rng.random() < 0.3):
                frames += [silence] * int(rng.integers(1, 3))
            first.append(len(frames))
            frames += [pattern[c]] * int(rng.integers(2, 7))
        frames += [silence] * int(rng.integers(1, 4))
        utt = np.array(frames)
        noise = rng.random(utt.shape) < 0.05
        utt[noise] = rng.integers(0, 1000, int(noise.sum()))
        codes.append(utt.astype(np.uint16))
        texts.append(text)
        starts.append(first)
    return codes, texts, starts


@pytest.fixture
def one_thread():
    """The toy model is too small to gain from threads; on a shared 2-core machine a second
    OpenMP thread waits on a busy core and made this test 7x slower."""
    with one_torch_thread():
        yield


def test_trained_toy_aligner_finds_character_boundaries(tmp_path, one_thread):
    torch.manual_seed(0)
    codes, texts, starts = toy_corpus(np.random.default_rng(0), 240)
    write_tokens(tmp_path / "tokens", codes, texts, max_shard_mb=14)
    aligner.main(
        ["train", "--tokens", str(tmp_path / "tokens"), "--out", str(tmp_path / "aligner"),
         "--max-steps", "150", "--batch-frames", "1500", "--lr", "3e-3", "--warmup", "30",
         "--size", "toy", "--val-every", "0", "--device", "cpu"]
    )  # fmt: skip
    aligner.main(
        ["align", "--tokens", str(tmp_path / "tokens"), "--aligner", str(tmp_path / "aligner"),
         "--device", "cpu"]
    )  # fmt: skip
    out = np.load(tmp_path / "tokens" / "align-00.npz")
    index, offsets = out["char_index"], np.load(tmp_path / "tokens" / "tokens-00.npz")["offsets"]
    hits = total = 0
    for u, first in enumerate(starts):
        got = index[offsets[u] : offsets[u] + len(codes[u])]
        for i in range(1, len(first)):
            total += 1
            hits += abs(int(np.argmax(got >= i)) - first[i]) <= 1
    print(f"{hits}/{total} boundaries within ±1 frame")
    assert hits / total >= 0.9, f"{hits}/{total} boundaries within ±1 frame"


def test_align_cli_writes_one_index_per_frame(tmp_path):
    torch.manual_seed(0)
    codes, texts, _ = toy_corpus(np.random.default_rng(1), 12)
    codes.append(np.zeros((2, 4), np.uint16))  # too short for its 4 letters: flagged
    texts.append("abcd")
    write_tokens(tmp_path / "tokens", codes, texts, max_shard_mb=14)
    aligner.main(
        ["train", "--tokens", str(tmp_path / "tokens"), "--out", str(tmp_path / "aligner"),
         "--max-steps", "1", "--size", "toy", "--device", "cpu"]
    )  # fmt: skip
    config = json.loads((tmp_path / "aligner" / "config.json").read_text())
    assert config["model_type"] == "voxgate-char-ctc"
    assert config["vocab_size"] == CharTokenizer().vocab_size
    aligner.main(
        ["align", "--tokens", str(tmp_path / "tokens"), "--aligner", str(tmp_path / "aligner"),
         "--device", "cpu"]
    )  # fmt: skip
    tokens = np.load(tmp_path / "tokens" / "tokens-00.npz")
    out = np.load(tmp_path / "tokens" / "align-00.npz")
    assert out["char_index"].dtype == np.int16 and len(out["char_index"]) == len(tokens["codes"])
    assert np.array_equal(out["lengths"], tokens["lengths"])
    assert out["score"].shape == tokens["lengths"].shape
    for u, text in enumerate(texts):
        off, n = tokens["offsets"][u], tokens["lengths"][u]
        got = out["char_index"][off : off + n].astype(int)
        assert got[0] == 0 and np.all(np.diff(got) >= 0) and got[-1] <= len(text) - 1
        if u < 12:  # alignable: every character gets a frame, the last one included
            assert set(got) == set(range(len(text))) and np.isfinite(out["score"][u])
    assert out["score"][-1] == -np.inf
