"""The per-request recurrent state pool the engine drives (models/recurrent_state.py): slots
claimed at a request's first chunk, kept across its chunks and decode steps, freed and reused,
grown without losing what live requests hold, and a continuation without state refused."""

from __future__ import annotations

import pytest
import torch

from models.recurrent_state import RecurrentStatePool, StateSpec

SPECS = (StateSpec((2, 3), torch.float32), StateSpec((2, 4, 5), torch.float32))


def _pool(capacity: int = 2) -> RecurrentStatePool:
    return RecurrentStatePool(3, SPECS, torch.device("cpu"), capacity=capacity)


def test_a_request_keeps_its_slot_from_prefill_through_decode_and_frees_it():
    pool = _pool()
    pool.begin_step(["a", "b"], [0, 0], [5, 3])  # two prompts, packed: rows 0..4, 5..7
    step = pool.step
    assert [(s.start, s.length, s.fresh) for s in step.segments] == [(0, 5, True), (5, 3, True)]
    a, b = pool.slot_of("a"), pool.slot_of("b")
    assert a != b and step.single_rows.numel() == 0 and len(step.longer) == 2
    pool.begin_step(["b", "a"], [3, 5], [1, 1])  # decodes continue from the same slots
    assert pool.step.single_slots.tolist() == [b, a]
    assert pool.step.single_rows.tolist() == [0, 1]
    assert pool.step.single_fresh.tolist() == [False, False]
    pool.free("a")
    assert pool.live == 1 and pool.slot_of("a") is None
    pool.begin_step(["c"], [0], [4])
    assert pool.slot_of("c") == a  # the freed slot, reset by c's prefill (fresh)
    assert pool.step.segments[0].fresh
    assert pool.bytes_per_request == 3 * (2 * 3 + 2 * 4 * 5) * 4


def test_a_fresh_row_reads_zeros_whatever_its_slot_held():
    pool = _pool()
    pool.begin_step(["a"], [0], [1])
    slots = pool.step.single_slots
    pool.write(0, slots, [torch.ones(1, 2, 3), torch.ones(1, 2, 4, 5)])
    conv, ssm = pool.read(0, slots, torch.tensor([True]))
    assert conv.abs().sum() == 0 and ssm.abs().sum() == 0
    conv, ssm = pool.read(0, slots, torch.tensor([False]))
    assert conv.sum() == 6 and ssm.sum() == 40


def test_growing_keeps_the_live_requests_state():
    pool = _pool(capacity=1)
    pool.begin_step(["a"], [0], [1])
    a = pool.slot_of("a")
    pool.write(2, pool.step.single_slots, [torch.full((1, 2, 3), 7.0), torch.zeros(1, 2, 4, 5)])
    pool.begin_step(["b", "c", "d"], [0, 0, 0], [1, 1, 1])  # past the capacity: it doubles
    assert pool.capacity >= 4 and pool.live == 4
    assert len({pool.slot_of(r) for r in "abcd"}) == 4
    assert torch.equal(pool.tensors[2][0][a], torch.full((2, 3), 7.0))


def test_continuing_without_state_is_refused_with_the_reason():
    pool = _pool()
    with pytest.raises(RuntimeError, match="holds no recurrent state"):
        pool.begin_step(["late"], [12], [1])
