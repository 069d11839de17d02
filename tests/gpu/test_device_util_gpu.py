"""Pinned staging (models/device_util.py) on a GPU, with each copy held back behind a long
kernel so it is still pending when the host moves on: a StagingRing's values all arrive
(and, as a control, arrive wrong when its waits are taken out), `upload`'s values all arrive
while torch's host allocator recycles its pinned blocks, and `download` reads what the
stream computed.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import pytest
import torch

from models.device_util import StagingRing, download, upload

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
STEPS = 40
HOLD = 2**26  # clock cycles the device sleeps before each copy (tens of ms on an H200)


class NoWait:
    """An event that never waits: a ring with these rewrites buffers under pending copies."""

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


def ring_sums(new_event) -> list[int]:
    """Fill a strided [4, 3] corner of a device table with i at step i, each copy queued
    behind a sleep; the device sums what it received each step."""
    ring = StagingRing(64, torch.int32, CUDA, new_event=new_event)
    table = torch.zeros(8, 16, dtype=torch.int32, device=CUDA)
    sums = torch.zeros(STEPS, dtype=torch.int32, device=CUDA)
    for i in range(STEPS):
        torch.cuda._sleep(HOLD)
        with ring.fill(table[:4, :3]) as host:
            host[...] = i
        sums[i] = table[:4, :3].sum()
    return sums.tolist()


def test_a_ring_delivers_every_fill_behind_pending_copies():
    assert ring_sums(None) == [12 * i for i in range(STEPS)]


def test_without_its_waits_a_ring_would_deliver_rewritten_values():
    """The control: the test above can see a buffer rewritten before its copy ran."""
    assert ring_sums(NoWait) != [12 * i for i in range(STEPS)]


def test_upload_delivers_every_value_behind_pending_copies():
    sums = torch.zeros(STEPS, dtype=torch.long, device=CUDA)
    for i in range(STEPS):
        torch.cuda._sleep(HOLD)
        sums[i] = upload([(i, i + 1)] * 3, torch.long, CUDA).sum()
    assert sums.tolist() == [3 * (2 * i + 1) for i in range(STEPS)]


def test_download_reads_what_the_stream_computed():
    x = torch.randn(3, 5000, device=CUDA)
    torch.cuda._sleep(HOLD)
    doubled = download(x * 2)
    assert (doubled == (x * 2).cpu().numpy()).all()
