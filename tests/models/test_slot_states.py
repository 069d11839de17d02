"""Codec state kept in place, one row a stream (models/codecs/slot_states.py), and the Mimi
halves that keep their streams' state there: slots reset for each new stream, freed with it,
grown without losing rows; graphs replayed only against the buffers they captured."""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass

import numpy as np
import torch

from models.codecs.mimi import MimiDetokenizer
from models.codecs.slot_states import SCRATCH, StateSlots
from tests.models.test_mimi import codes, rel_err, tiny_mimi


@dataclass
class Stream:
    slot: int | None = None


FRESH = [torch.zeros(3, 2), torch.full((4,), -1, dtype=torch.long)]


def test_each_stream_gets_its_own_row_reset_to_the_fresh_state():
    slots = StateSlots(FRESH, capacity=4)
    for buffer in slots.buffers:
        buffer.fill_(7)  # what earlier streams left
    a, b = Stream(), Stream()
    rows = [slots.bind(a), slots.bind(b)]
    assert len(set(rows)) == 2 and SCRATCH not in rows
    assert slots.bind(a) == rows[0]  # bound once
    for buffer, fresh in zip(slots.buffers, FRESH, strict=True):
        for row in rows:
            assert torch.equal(buffer[row], fresh)


def test_a_stream_that_is_gone_gives_its_row_back():
    slots = StateSlots(FRESH, capacity=3)
    a = Stream()
    row = slots.bind(a)
    slots.buffers[0][row] = 5.0
    assert slots.in_use == 1
    del a
    gc.collect()
    assert slots.in_use == 0
    b = Stream()
    assert slots.bind(b) == row and torch.equal(slots.buffers[0][row], FRESH[0])


def test_a_stream_collected_inside_a_locked_section_gives_its_row_back_later():
    """A finalizer runs wherever a garbage collection does, inside the slots' own locked
    section too (two codec threads share them): it only queues the row, which the lock's next
    holder takes back, where taking the lock itself would hang that thread."""
    slots = StateSlots(FRESH, capacity=3)
    a = Stream()
    a.cycle = a  # garbage only to the cycle collector
    row = slots.bind(a)
    del a
    done = threading.Event()

    def collect_while_locked() -> None:
        with slots._lock:
            gc.collect()
        done.set()

    threading.Thread(target=collect_while_locked, daemon=True).start()
    assert done.wait(30), "the finalizer waited for the lock its own thread held"
    assert slots.in_use == 0 and slots.bind(Stream()) == row


def test_growing_keeps_every_row_and_says_so():
    slots = StateSlots(FRESH, capacity=2)  # scratch and one row
    first = Stream()
    row = slots.bind(first)
    slots.buffers[0][row] = 3.0
    generation = slots.generation
    more = [Stream() for _ in range(5)]
    bound = [slots.bind(s) for s in more]
    assert slots.generation > generation and slots.capacity >= 7
    assert len(set(bound + [row])) == 6 and SCRATCH not in bound
    assert torch.equal(slots.buffers[0][row], torch.full((3, 2), 3.0))


def test_size_for_makes_room_up_front():
    slots = StateSlots(FRESH, capacity=2)
    slots.size_for(16)
    generation = slots.generation
    streams = [Stream() for _ in range(16)]
    for s in streams:
        slots.bind(s)
    assert slots.generation == generation  # no reallocation while serving 16


def test_gather_and_scatter_address_rows():
    slots = StateSlots(FRESH, capacity=4)
    a, b = Stream(), Stream()
    rows = torch.tensor([slots.bind(b), slots.bind(a)])
    new = [torch.arange(12.0).view(2, 3, 2), torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])]
    slots.scatter(rows, new)
    assert torch.equal(slots.gather(torch.tensor([a.slot]))[1], torch.tensor([[5, 6, 7, 8]]))
    assert torch.equal(slots.gather(rows)[0], new[0])


def test_a_new_mimi_stream_on_a_reused_row_decodes_as_if_alone():
    """A row left by a stream that ended must not leak its past into the next stream."""
    det = MimiDetokenizer(tiny_mimi())
    old = det.new_stream()
    det.push(old, codes(6, seed=1).tolist())
    det.decode([old])
    row = old.slot
    del old
    gc.collect()
    fresh_frames = codes(5, seed=2)
    new = det.new_stream()
    det.push(new, fresh_frames.tolist())
    (audio,) = det.decode([new])
    assert new.slot == row
    alone = MimiDetokenizer(tiny_mimi())
    lone = alone.new_stream()
    alone.push(lone, fresh_frames.tolist())
    (expected,) = alone.decode([lone])
    assert rel_err(audio, expected) < 1e-6


class RecordingGraphs:
    """Stands in for engine.cuda_graphs.CallableGraphs on the CPU: capture runs the call,
    run counts the replays of captured keys."""

    def __init__(self) -> None:
        self.captured: set = set()
        self.replays: list = []

    def __contains__(self, key) -> bool:
        return key in self.captured

    def capture(self, key, fn, inputs):
        self.captured.add(key)
        return fn(*inputs)

    def run(self, key, fn, inputs):
        if key in self.captured:
            self.replays.append(key)
        return fn(*inputs)


def test_mimi_replays_only_against_the_buffers_it_captured():
    det = MimiDetokenizer(tiny_mimi())
    det.pad_batches = True  # as on CUDA, where warm-up captures the buckets
    graphs = RecordingGraphs()
    det.enable_cuda_graphs(graphs)
    det.warm_up_batches(4)
    assert ("mimi-decode", 4, 1) in graphs.captured and ("mimi-decode", 1, 1) in graphs.captured
    streams = [det.new_stream() for _ in range(3)]
    for s in streams:
        det.push(s, codes(1, seed=3).tolist())
    det.decode(streams)
    assert graphs.replays == [("mimi-decode", 4, 1)]
    crowd = [det.new_stream() for _ in range(8)]  # more streams than sized for: buffers grow
    for s in crowd:
        det.push(s, codes(1, seed=4).tolist())
    audio = det.decode(crowd)
    assert graphs.replays == [("mimi-decode", 4, 1)]  # not replayed against stale buffers
    assert all(len(a) == 1920 and np.isfinite(a).all() for a in audio)
