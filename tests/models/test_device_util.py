"""Host → device staging (models/device_util.py) on the CPU: a StagingRing's bookkeeping with
fake events (buffers taken in turn, each rewritten only after its previous copy's event was
waited for, values landing in the destination, clear errors), and `upload` / `download`
giving what the plain torch calls give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.device_util import StagingRing, download, upload

CPU = torch.device("cpu")


class FakeEvent:
    """Logs its calls as (what, slot); `on_wait` runs inside synchronize (a check of what the
    host buffers hold at the moment a real wait would return)."""

    def __init__(self, log: list, slot: int, on_wait=None) -> None:
        self.log, self.slot, self.on_wait = log, slot, on_wait

    def record(self) -> None:
        self.log.append(("record", self.slot))

    def synchronize(self) -> None:
        self.log.append(("wait", self.slot))
        if self.on_wait is not None:
            self.on_wait(self.slot)


def ring_with_fake_events(capacity: int = 8, slots: int = 2, on_wait=None):
    log: list = []
    made = iter(range(slots))
    ring = StagingRing(
        capacity, torch.long, CPU, slots, new_event=lambda: FakeEvent(log, next(made), on_wait)
    )
    return ring, log


def test_buffers_are_taken_in_turn_each_waited_for_before_reuse():
    ring, log = ring_with_fake_events(slots=2)
    dst = torch.zeros(4, dtype=torch.long)
    for i in range(3):
        ring.write(dst, [i] * 4)
    assert log == [
        ("wait", 0), ("record", 0),
        ("wait", 1), ("record", 1),
        ("wait", 0), ("record", 0),
    ]  # fmt: skip


def test_a_buffer_is_rewritten_only_after_its_copy_was_waited_for():
    held: dict[int, tuple[np.ndarray, list[int]]] = {}  # slot → (its host array, what it held)

    def still_holds_the_old_values(slot: int) -> None:
        if slot in held:
            array, values = held[slot]
            assert array.tolist() == values  # not yet overwritten when the wait returns

    ring, log = ring_with_fake_events(slots=2, on_wait=still_holds_the_old_values)
    dst = torch.zeros(3, dtype=torch.long)
    for i in range(5):
        values = [10 * i, 10 * i + 1, 10 * i + 2]
        with ring.fill(dst) as host:
            host[...] = values
        held[i % 2] = (host, values)
        assert dst.tolist() == values
    assert [slot for what, slot in log if what == "wait"] == [0, 1, 0, 1, 0]


def test_values_land_in_a_strided_destination_and_padding_is_written():
    ring = StagingRing(4 * 6, torch.int32, CPU)
    table = torch.full((4, 6), -1, dtype=torch.int32)  # [rows, width]: fill [3, 2] of it
    with ring.fill(table[:3, :2]) as host:
        host[...] = 7
        host[0] = (1, 2)
    assert table.tolist() == [
        [1, 2, -1, -1, -1, -1],
        [7, 7, -1, -1, -1, -1],
        [7, 7, -1, -1, -1, -1],
        [-1, -1, -1, -1, -1, -1],
    ]


def test_oversized_input_and_wrong_dtype_raise_clearly():
    ring = StagingRing(4, torch.long, CPU)
    with pytest.raises(ValueError, match=r"5 values \(\(5,\)\) exceed the 4"):
        ring.write(torch.zeros(5, dtype=torch.long), range(5))
    with pytest.raises(ValueError, match="cannot fill a torch.int32"):
        ring.write(torch.zeros(2, dtype=torch.int32), [1, 2])
    with pytest.raises(ValueError, match="numpy's dtypes"):
        StagingRing(4, torch.bfloat16, CPU)


def test_a_failed_fill_copies_nothing_and_keeps_its_buffer():
    ring, log = ring_with_fake_events(slots=2)
    dst = torch.zeros(2, dtype=torch.long)
    with pytest.raises(KeyError), ring.fill(dst) as host:
        host[...] = 5
        raise KeyError("a request left mid-step")
    assert dst.tolist() == [0, 0]
    ring.write(dst, [1, 2])
    assert dst.tolist() == [1, 2]
    assert log == [("wait", 0), ("wait", 0), ("record", 0)]


def test_on_the_cpu_no_event_is_made(monkeypatch):
    def no_events():
        raise AssertionError("a CPU staging ring made a CUDA event")

    monkeypatch.setattr(torch.cuda, "Event", no_events)
    ring = StagingRing(4, torch.float32, CPU)
    dst = torch.zeros(3)
    for i in range(3):
        ring.write(dst, [i, 0.5, -1.25])
        assert dst.tolist() == [i, 0.5, -1.25]


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([3, 1, 4, 1, 5], torch.long),
        ([], torch.long),
        ([(1, 2, 3), (4, 5, 6)], torch.long),  # rows of tokens
        ([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], torch.long),  # [B, n, K] codes
        ([0.1, 1.0 / 3.0, 2.5e-8, 1e30], torch.float32),
        ([True, False, 1, 0], torch.bool),
        ([1.3, 1.0], torch.bfloat16),  # no numpy dtype: built by torch
    ],
)
def test_upload_on_the_cpu_equals_torch_tensor(values, dtype):
    expected = torch.tensor(values, dtype=dtype)
    got = upload(values, dtype, CPU)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)


def test_upload_refuses_values_out_of_the_dtypes_range():
    with pytest.raises(OverflowError):  # torch.tensor refuses them too (a RuntimeError)
        upload([2**31 + 5], torch.int32, CPU)


def test_upload_copies_an_array_it_is_handed():
    array = np.arange(4, dtype=np.int64)
    got = upload(array, torch.long, CPU)
    got.add_(1)  # callers write into what upload returns (the worker's index_copy_)
    assert array.tolist() == [0, 1, 2, 3]


def test_download_on_the_cpu_reads_the_values():
    audio = torch.linspace(-1, 1, 5)
    assert download(audio).tolist() == audio.tolist()
