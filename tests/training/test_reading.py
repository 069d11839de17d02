"""The reading column (models/voxgate_tiny/lm.py): aligned characters become each frame row's
reading class, sit in the rows' text column as input and in `read` as the depth stage's
target, and the loss trains the reading head (CPU, toy sizes)."""

import numpy as np
import pytest
import torch

from models.codecs.voxcodec import VoxCodecConfig
from models.voxgate_tiny.checkpoint import build_lm
from models.voxgate_tiny.config import VoxgateTinyConfig, tiny_config_dict
from models.voxgate_tiny.text import CharTokenizer
from training.speechlm import (
    IGNORE,
    Regularisers,
    Utterance,
    corrupt_reading,
    losses,
    make_batch,
    reading_rows,
)

TOK = CharTokenizer()


def test_reading_rows_take_the_last_frame_and_flag_every_new_position():
    ids = TOK.encode("all")  # <bos> a l l <audio>: a double letter
    a, ell = ids[1], ids[2]
    # 9 frames: a a | l l | l l | l (tail) — the second "l" begins inside row 2.
    char_index = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    got = reading_rows(ids, char_index, frames_per_row=2)
    # Rows end on frames 1, 3, 5, 7, 8 → positions 0, 1, 2, 2, 2.
    assert got.tolist() == [2 * a + 1, 2 * ell + 1, 2 * ell + 1, 2 * ell, 2 * ell]
    one = reading_rows(ids, char_index, frames_per_row=1)
    assert one.tolist()[:3] == [2 * a + 1, 2 * a, 2 * ell + 1]
    with pytest.raises(ValueError, match="outside"):
        reading_rows(ids, np.array([0, 3]), 1)


def _lm(reading: bool):
    codec = VoxCodecConfig(
        encoder_dim=16,
        encoder_blocks=1,
        decoder_dim=16,
        decoder_blocks=1,
        fine_dim=8,
        fine_blocks=1,
    )
    cfg = tiny_config_dict(
        codec,
        TOK.vocab_size,
        hidden=32,
        layers=2,
        heads=2,
        kv_heads=1,
        intermediate=64,
        depth_intermediate=32,
        max_positions=128,
        reading=reading,
    )
    torch.manual_seed(0)
    return build_lm(VoxgateTinyConfig.from_dict(cfg))


def test_batch_puts_reading_in_the_text_column_and_the_targets():
    lm = _lm(reading=True)
    k, v = lm.num_codebooks, lm.text_vocab
    rng = np.random.default_rng(0)
    ids = TOK.encode("hi")
    reading = reading_rows(ids, np.array([0, 0, 1, 1, 1, 1]), 2)  # 3 rows
    utt = Utterance(ids, rng.integers(0, 1000, (3, k)).astype(np.uint16), reading)
    batch = make_batch([utt], k, lm.eos, v)
    t = len(ids)
    assert batch["rows"][0, :t, k].tolist() == ids
    assert batch["rows"][0, t:, k].tolist() == (v + reading).tolist()
    assert batch["read"][0, t - 1 : t + 2].tolist() == reading.tolist()
    assert (batch["read"][0, : t - 1] == IGNORE).all() and batch["read"][0, t + 2] == IGNORE

    lm.train()
    total, parts = losses(lm, batch, Regularisers())
    assert "read" in parts and np.isfinite(parts["read"])
    total.backward()
    assert lm.depth.read_head.weight.grad.abs().sum() > 0
    assert lm.embed_text.weight.grad[v:].abs().sum() > 0  # the reading ids are embedded


def test_plain_model_has_no_reading_and_ignores_the_column():
    lm = _lm(reading=False)
    assert lm.depth.read_head is None and lm.embed_text.num_embeddings == TOK.vocab_size
    utt = Utterance(TOK.encode("hi"), np.zeros((3, lm.num_codebooks), np.uint16))
    _, parts = losses(lm, make_batch([utt], lm.num_codebooks, lm.eos, lm.text_vocab))
    assert "read" not in parts


def test_reading_noise_touches_only_frame_rows_reading_ids():
    torch.manual_seed(0)
    v = 10
    rows = torch.full((1, 8, 3), -1, dtype=torch.long)
    rows[0, :3, 2] = torch.tensor([1, 2, 3])  # text rows
    rows[0, 3:, :2] = 5
    rows[0, 3:, 2] = v + torch.arange(5)
    noisy = corrupt_reading(rows, k=2, text_vocab=v, share=0.6)
    assert torch.equal(noisy[..., :2], rows[..., :2]) and torch.equal(noisy[0, :3], rows[0, :3])
    assert (noisy[0, 3:, 2] != rows[0, 3:, 2]).any()
    assert ((noisy[0, 3:, 2] >= v) & (noisy[0, 3:, 2] < 3 * v)).all()
