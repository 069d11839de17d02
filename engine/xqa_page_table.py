"""The dense page table and sequence lengths XQA decode reads, written once per step.

XQA (engine/xqa_decode.py) takes a page table [batch, pages per sequence] instead of
FlashInfer's CSR form. It lives in one device buffer, `page_table` [max_batch, width], sized
for the engine's largest batch and the longest context the model allows, so captured CUDA
graphs always read the same memory. The kernel reads no page past a row's length, so columns
past it may hold anything.

A step whose layout names its requests (`StepLayout.owners`) fills it from `by_slot`
[max_slots, width], a device table holding each live request's pages in a row of its own
(engine/page_table_mirror.py keeps the host's record): the step writes the pages added since
the last step into `by_slot`, then gathers its rows into `page_table` on the device. A layout
without owners (graph capture's dummy steps, a model's own decode loop) has its table rebuilt
on the host, as dense rows.

Releasing a request's slot, and handing it to a new request, is safe while a step that read
it may still run on the device: a step's kernels read `page_table`, never `by_slot`, and
`page_table` was filled from `by_slot` when that step was prepared. Every write to `by_slot`
and `page_table` is queued on the same stream as the steps, so the next prepare's writes run
after the step before it has read its table.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.attention import StepLayout
from engine.page_table_mirror import PageTableMirror
from models.device_util import upload

# Slots of `by_slot`: a row per request alive at once, which may be more than a step's rows
# (requests sit steps out, or have finished decoding and wait for their last audio); the
# table doubles when every slot is held. A row is `width` int32 (32 KiB at Orpheus' 131,072-
# token context).
SLOTS_PER_STEP_ROW = 4
MIN_SLOTS = 1024


def slots_for(max_batch: int) -> int:
    """Slots for an engine of `max_batch` rows a step (slot 0 pads)."""
    return 1 + max(SLOTS_PER_STEP_ROW * max_batch, MIN_SLOTS)


class XqaPageTable:
    def __init__(
        self,
        max_batch: int,
        width: int,
        scratch_block: int,
        device: torch.device,
        max_slots: int | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.width = width
        self.scratch_block = scratch_block
        self.device = device
        max_slots = max_slots or slots_for(max_batch)
        self.mirror = PageTableMirror(max_slots)
        # All scratch at first: slot 0 stays so (padding rows read it), and a row's columns
        # past its owner's pages are never read.
        self.by_slot = torch.full(
            (max_slots, width), scratch_block, dtype=torch.int32, device=device
        )  # [max_slots, width]
        self.page_table = torch.full(
            (max_batch, width), scratch_block, dtype=torch.int32, device=device
        )  # [max_batch, width]: what the kernel reads, rows in the step's order
        self.seq_lens = torch.ones(max_batch, dtype=torch.int32, device=device)  # [max_batch]

    def write(self, layout: StepLayout, rows: int) -> None:
        """The step's rows of `page_table` and `seq_lens`; `rows` ≥ its requests (a graph
        bucket: padding rows attend to one token of the scratch page)."""
        if rows > self.max_batch:
            raise ValueError(
                f"a decode step of {rows} rows exceeds the {self.max_batch} the XQA page table "
                "was sized for (max_num_seqs)"
            )
        longest = max(layout.context_lens, default=1)
        if -(-longest // layout.block_size) > self.width:
            raise ValueError(
                f"a context of {longest} tokens exceeds the model's "
                f"{self.width * layout.block_size}-token limit the XQA page table was sized for"
            )
        if layout.owners:
            self._gather(layout, rows)
        else:
            self._rebuild(layout, rows)

    def release(self, owner: str) -> None:
        """`owner` has ended: its slot may go to a new request (safe while a step that read
        it is in flight: the module's docstring says why)."""
        self.mirror.release(owner)

    def _gather(self, layout: StepLayout, rows: int) -> None:
        update = self.mirror.update(
            layout.owners, layout.block_tables, layout.context_lens, layout.block_size, rows
        )
        if self.mirror.max_slots > self.by_slot.shape[0]:  # more live requests than slots
            grown = torch.full(
                (self.mirror.max_slots, self.width),
                self.scratch_block,
                dtype=torch.int32,
                device=self.device,
            )
            grown[: self.by_slot.shape[0]] = self.by_slot
            self.by_slot = grown  # read by no captured graph: it may move
        n, e = len(layout.context_lens), len(update.pages)
        lens = layout.context_lens + [1] * (rows - n)
        # One upload for all of it: [slot per row | length per row | slots | columns | pages].
        host = update.slot_ids + lens + update.slots + update.columns + update.pages
        staged = upload(host, torch.long, self.device)
        if e:
            at = 2 * rows
            where = (staged[at : at + e], staged[at + e : at + 2 * e])
            self.by_slot.index_put_(where, staged[at + 2 * e :].to(torch.int32))
        torch.index_select(self.by_slot, 0, staged[:rows], out=self.page_table[:rows])
        self.seq_lens[:rows].copy_(staged[rows : 2 * rows])

    def _rebuild(self, layout: StepLayout, rows: int) -> None:
        """Dense rows from the block tables, on the host: the columns the step uses."""
        bs = layout.block_size
        pages = [-(-ctx // bs) for ctx in layout.context_lens]
        used = max(pages, default=1)
        table = np.full((rows, used), self.scratch_block, dtype=np.int32)
        for row, (blocks, n) in enumerate(zip(layout.block_tables, pages, strict=True)):
            table[row, :n] = blocks[:n]
        lens = np.ones(rows, dtype=np.int32)
        lens[: len(layout.context_lens)] = layout.context_lens
        # Non-blocking copies from pageable memory are staged by the driver, so the host
        # arrays may go; the driver may sync the stream first (models/device_util.py).
        self.page_table[:rows, :used].copy_(torch.from_numpy(table), non_blocking=True)
        self.seq_lens[:rows].copy_(torch.from_numpy(lens), non_blocking=True)
