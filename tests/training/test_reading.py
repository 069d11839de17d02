"""The reading pointer (models/voxgate_tiny/lm.py): aligned characters become each frame row's
pointer, its reading columns (as the served model's follow_row writes them) and the advance
targets; the loss trains the advance head; served, the pointer walks forward through the real
text and never past its end (CPU, toy sizes)."""

import numpy as np
import pytest
import torch

from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.codecs.voxcodec import VoxCodec, VoxCodecConfig
from models.codecs.voxcodec_stream import VoxCodecDetokenizer
from models.voxgate_tiny.checkpoint import build_lm
from models.voxgate_tiny.config import VoxgateTinyConfig, tiny_config_dict
from models.voxgate_tiny.lm import DenseCausalAttention
from models.voxgate_tiny.model import VoxgateTinyModel
from models.voxgate_tiny.text import CharTokenizer
from training.speechlm import Regularisers, losses, with_reading
from training.speechlm_data import IGNORE, Utterance, make_batch, reading_columns, reading_rows

TOK = CharTokenizer()
CPU = torch.device("cpu")
V = TOK.vocab_size


def test_reading_rows_take_each_rows_last_frame():
    ids = TOK.encode("all")  # <bos> a l l <audio>
    char_index = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])  # 9 frames, rows end on 1, 3, 5, 7, 8
    assert reading_rows(ids, char_index, frames_per_row=2).tolist() == [0, 1, 2, 2, 2]
    assert reading_rows(ids, char_index, frames_per_row=1).tolist() == char_index.tolist()
    with pytest.raises(ValueError, match="outside"):
        reading_rows(ids, np.array([0, 3]), 1)


def test_reading_columns_hold_the_character_the_next_one_and_the_advance():
    ids = TOK.encode("hey")
    h, e, y = ids[1:4]
    columns, advance = reading_columns(ids, np.array([0, 0, 2, 2]), V)
    assert columns.tolist() == [
        [V + h, 2 * V + e, 0],
        [V + h, 2 * V + e, 0],
        [V + y, 3 * V, 2],  # past the end after the last character
        [V + y, 3 * V, 2],
    ]
    assert advance.tolist() == [0, 0, 2, 0]
    assert reading_columns(ids, np.array([0, 2]), V)[1].tolist() == [0, 2]


CODEC = VoxCodecConfig(
    encoder_dim=16, encoder_blocks=1, decoder_dim=16, decoder_blocks=1, fine_dim=8, fine_blocks=1
)


def _lm(reading: bool, pointer_positions: int = 0):
    cfg = tiny_config_dict(
        CODEC,
        V,
        hidden=32,
        layers=2,
        heads=2,
        kv_heads=1,
        intermediate=64,
        depth_intermediate=32,
        max_positions=128,
        reading=reading,
        pointer_positions=pointer_positions,
    )
    torch.manual_seed(0)
    return build_lm(VoxgateTinyConfig.from_dict(cfg))


def test_batch_and_loss_train_the_advance_head():
    lm = _lm(reading=True)
    k = lm.num_codebooks
    rng = np.random.default_rng(0)
    ids = TOK.encode("hi")
    pointer = np.array([0, 1, 1])
    utt = Utterance(ids, rng.integers(0, 1000, (3, k)).astype(np.uint16), pointer)
    batch = make_batch([utt], k, lm.eos, V)
    t = len(ids)
    assert batch["rows"].shape[-1] == lm.row_width == k + 3
    assert batch["rows"][0, :t, k].tolist() == ids and (batch["rows"][0, :t, k + 1] == -1).all()
    # Text rows carry their symbol's index (absent on <bos> and <audio>), as prompt_rows does.
    assert batch["rows"][0, :t, k + 2].tolist() == [-1, 0, 1, -1]
    assert batch["rows"][0, t:, k:].tolist() == reading_columns(ids, pointer, V)[0].tolist()
    assert batch["read"][0, t - 1 : t + 2].tolist() == [0, 1, 0]
    assert (batch["read"][0, : t - 1] == IGNORE).all() and batch["read"][0, t + 2] == IGNORE

    lm.train()
    total, parts = losses(lm, batch, Regularisers())
    assert "read" in parts and np.isfinite(float(parts["read"]))
    total.backward()
    assert lm.depth.read_head.weight.grad.abs().sum() > 0
    assert lm.embed_text.weight.grad[V:].abs().sum() > 0  # the reading columns are embedded


def test_plain_model_has_no_reading():
    lm = _lm(reading=False)
    assert lm.depth.read_head is None and lm.embed_text.num_embeddings == V
    utt = Utterance(TOK.encode("hi"), np.zeros((3, lm.num_codebooks), np.uint16))
    batch = make_batch([utt], lm.num_codebooks, lm.eos, V)
    assert batch["rows"].shape[-1] == lm.num_codebooks + 1
    assert "read" not in losses(lm, batch)[1]


def test_served_pointer_walks_the_text_and_stops_at_its_end():
    lm = _lm(reading=True)

    model = VoxgateTinyModel(
        lm, TOK, VoxCodecDetokenizer(VoxCodec(CODEC).eval()), {}, frames_per_row=2
    )
    prompt = model.prompt_rows("Hi!")  # h i !
    h, i, bang = (row[lm.num_codebooks] for row in prompt[1:-1])
    out: list[tuple[int, ...]] = []
    k = lm.num_codebooks
    for advance in (0, 1, 3, 0):  # the last advance would run past the end: it stops there
        out.append(model.follow_row(prompt, out, (*range(k), advance, -1, -1)))
    assert [row[k:] for row in out] == [
        (V + h, 2 * V + i, 0),
        (V + i, 2 * V + bang, 1),
        (V + bang, 3 * V, 2),
        (V + bang, 3 * V, 2),
    ]
    assert all(row[:k] == tuple(range(k)) for row in out)  # codes are left alone


def test_a_plain_model_gains_the_pointer_with_its_weights_kept():
    plain, fresh = _lm(reading=False), _lm(reading=True)
    reader = with_reading(plain, fresh)
    k = plain.num_codebooks
    prompt = torch.tensor([[-1] * k + [t] for t in TOK.encode("hi there")])
    rows = torch.cat([prompt, torch.full((len(prompt), 2), -1)], dim=1)  # pointer columns absent
    positions = torch.arange(len(prompt))
    with torch.no_grad():
        attn = DenseCausalAttention(1, len(prompt))
        want = plain.first_logits(plain(prompt, positions, attn))
        got = reader.first_logits(reader(rows, positions, attn))
    torch.testing.assert_close(got, want)  # the prompt reads exactly as before
    assert reader.depth.read_head is not None
    assert torch.equal(
        reader.depth.embed.weight[: len(plain.depth.embed.weight)], plain.depth.embed.weight
    )


def test_pointer_positions_tie_each_frame_to_its_symbols_prompt_row():
    lm = _lm(reading=True, pointer_positions=16)
    k = lm.num_codebooks
    model = VoxgateTinyModel(
        lm, TOK, VoxCodecDetokenizer(VoxCodec(CODEC).eval()), {}, frames_per_row=2
    )
    ids = TOK.encode("hey")
    utt = Utterance(ids, np.zeros((4, k), np.uint16), np.array([0, 0, 2, 2]))
    batch = make_batch([utt], k, lm.eos, V)
    served = model.prompt_rows("hey")
    assert batch["rows"][0, : len(ids)].tolist() == [list(r) for r in served]  # same layout

    # A row holding only an index embeds as that index's vector, in prompt and frame rows alike.
    only = torch.full((3, lm.row_width), -1)
    only[:, k + 2] = torch.tensor([0, 2, 40])  # 40: past the table, read as its last entry
    with torch.no_grad():
        got = lm.embed(only)
    torch.testing.assert_close(got, lm.embed_position.weight[[0, 2, 15]])

    lm.train()
    losses(lm, batch, Regularisers())[0].backward()
    grad = lm.embed_position.weight.grad.abs().sum(1)
    assert (grad[:3] > 0).all() and (grad[3:] == 0).all()  # "hey": symbols 0-2 only

    with pytest.raises(ModelInputError, match="16 positions"):
        model.prompt_rows("a sentence far longer than sixteen characters")
    assert _lm(reading=True).embed_position is None  # 0 (run 8 and before): no table
    with pytest.raises(CheckpointError, match="needs"):
        _lm(reading=False, pointer_positions=16)


def test_guided_heads_of_a_reading_model_aim_at_the_symbol_being_said():
    lm = _lm(reading=True, pointer_positions=16).train()
    k = lm.num_codebooks
    ids = TOK.encode("hey")
    utt = Utterance(ids, np.zeros((4, k), np.uint16), np.array([0, 0, 2, 2]))
    batch = make_batch([utt], k, lm.eos, V)
    guided = dict(guided_weight=1.0, guided_layers=frozenset({0}), guided_heads=1)
    torch.manual_seed(0)
    aimed = losses(lm, batch, Regularisers(**guided))[1]["guide"]
    torch.manual_seed(0)
    diagonal = losses(lm, batch, Regularisers(**guided, guided_target="diagonal"))[1]["guide"]
    # Same forward pass (same seed: same input noise), two targets: two penalties.
    assert 0 < float(aimed) < 1 and 0 < float(diagonal) < 1
    assert float(aimed) != float(diagonal)


def _eager_to_stop(model: VoxgateTinyModel) -> None:
    """Make the model want to end its audio at every row and read one symbol a row."""
    lm = model.lm

    def first_logits(hidden):
        logits = torch.zeros(len(hidden), lm.codebook_size + 1)
        logits[:, lm.eos] = 50.0
        return logits

    generate = lm.depth.generate

    def one_symbol_a_row(hidden, first, sample):
        codes, advance = generate(hidden, first, sample)
        return codes, torch.ones_like(advance)

    lm.first_logits = first_logits
    lm.depth.generate = one_symbol_a_row


def test_a_reading_model_ends_its_audio_only_after_the_last_sound_of_its_text():
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.outputs import SpeechRequest
    from engine.request import SamplingParams

    model = VoxgateTinyModel(
        _lm(reading=True), TOK, VoxCodecDetokenizer(VoxCodec(CODEC).eval()), {}, frames_per_row=2
    )
    _eager_to_stop(model)
    k = model.k
    prompt = model.prompt_rows("Hi. Go!")  # h i . ␣ g o !: the last sound is "o", symbol 5
    assert not model.may_stop(prompt, [])
    assert not model.may_stop(prompt, [(0,) * k + (-1, -1, 2)])  # at the first "."
    assert model.may_stop(prompt, [(0,) * k + (-1, -1, 5)])

    def rows_before_stop(text: str) -> list:
        core = EngineCore(model, EngineConfig(num_kv_blocks=32, block_size=16), CPU, "sdpa")
        params = SamplingParams(temperature=0.0, max_tokens=50)
        request = core.add_request(SpeechRequest(text, None, params))
        while core.has_work():
            core.step()
        return [row for row in request.output_ids if not model.is_stop(row)]

    said = rows_before_stop("Hi. Go!")
    # One symbol a row from "h": rows point at i, ., ␣, g, o, then the stop is allowed.
    assert [row[k + 2] for row in said] == [1, 2, 3, 4, 5]
    model.may_stop = lambda prompt, output: True  # as before: the first row already stops
    assert rows_before_stop("Hi. Go!") == []


def test_a_stalled_pointer_may_stop_where_it_is():
    from models.voxgate_tiny.model import STALLED_ROWS

    model = VoxgateTinyModel(
        _lm(reading=True), TOK, VoxCodecDetokenizer(VoxCodec(CODEC).eval()), {}, frames_per_row=2
    )
    k = model.k
    prompt = model.prompt_rows("Hi. Go!")
    row_at = [(0,) * k + (-1, -1, at) for at in (1, 2)]
    moving = [row_at[0]] + [row_at[1]] * STALLED_ROWS  # at the "." for STALLED_ROWS rows
    assert not model.may_stop(prompt, moving)
    assert model.may_stop(prompt, moving + [row_at[1]])  # one more: stalled, so it may stop
