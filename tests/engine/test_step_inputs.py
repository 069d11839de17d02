"""A step's inputs (Worker._step_inputs): each token's id, position and KV slot, with the
ids of decodes still in flight gathered from the previous step's tokens on the device, and a
token that is neither resolved nor in flight refused instead of run with a stale id."""

from __future__ import annotations

import types

import pytest
import torch

from engine.outputs import ScheduledChunk
from engine.request import Request, SamplingParams
from engine.worker import LaunchedStep, Worker

BLOCK = 4
WORKER = types.SimpleNamespace(device=torch.device("cpu"))  # all _step_inputs reads of self


def request(prompt: int, outputs: int, inflight: int, first_page: int) -> Request:
    r = Request(list(range(100, 100 + prompt)), SamplingParams(), arrival_time=0.0)
    r.output_ids = list(range(500, 500 + outputs))
    r.num_inflight = inflight
    r.block_table = list(range(first_page, first_page + 8))
    return r


def test_decodes_in_flight_and_a_prefill_chunk_in_one_step():
    a, b = request(3, 2, 1, 10), request(3, 4, 1, 20)  # decodes of a token still on the device
    fresh = request(6, 0, 0, 30)  # its first 5 prompt tokens this step
    previous = LaunchedStep([b, a], torch.tensor([7, 9]))  # b sampled row 0, a row 1
    chunks = [ScheduledChunk(a, 5, 1), ScheduledChunk(fresh, 0, 5), ScheduledChunk(b, 7, 1)]
    ids, positions, layout = Worker._step_inputs(WORKER, chunks, BLOCK, previous)
    assert ids.tolist() == [9, 100, 101, 102, 103, 104, 7]
    assert positions == [5, 0, 1, 2, 3, 4, 7]
    assert layout.slot_mapping == [11 * 4 + 1, 120, 121, 122, 123, 31 * 4 + 0, 21 * 4 + 3]
    assert layout.query_lens == [1, 5, 1] and layout.context_lens == [6, 5, 8]


def test_a_token_neither_resolved_nor_in_flight_is_refused():
    a = request(3, 2, 1, 10)
    stale = LaunchedStep([request(3, 2, 1, 40)], torch.tensor([1]))  # another request's step
    for previous in (None, stale):
        with pytest.raises(RuntimeError, match="neither resolved nor in flight"):
            Worker._step_inputs(WORKER, [ScheduledChunk(a, 5, 1)], BLOCK, previous)
    ahead = LaunchedStep([a], torch.tensor([1]))  # in flight, but the chunk skips a position
    with pytest.raises(RuntimeError, match="neither resolved nor in flight"):
        Worker._step_inputs(WORKER, [ScheduledChunk(a, 6, 1)], BLOCK, ahead)
