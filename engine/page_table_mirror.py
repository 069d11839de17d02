"""Which row ("slot") of a device-resident page table holds each live request's KV pages, and
which of its entries a step must write: integers only, no torch.

XQA decode (engine/xqa_decode.py) reads a dense page table, [rows, pages], in the step's row
order. Rows come in a new order every step (the scheduler orders them by urgency) and some
requests sit a step out, so that table cannot be kept in row order; rebuilding it on the host
from every request's block table cost ~0.6 ms a step at 224 rows. Instead each request keeps
one slot of a device table for its whole life: a step writes only the pages added since the
last (a decoding request gains one every `block_size` tokens) and gathers its rows from the
slots on the device (engine/xqa_page_table.py).

Slot 0 is never handed out: it stays all scratch page, for the padding rows of a graph bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PageTableUpdate:
    """One step's work on the device table: the writes first, then the gather."""

    slot_ids: list[int]  # [rows] the slot each row reads; padding rows read slot 0
    slots: list[int] = field(default_factory=list)  # [E] each new entry's slot,
    columns: list[int] = field(default_factory=list)  # [E] its column (page index)
    pages: list[int] = field(default_factory=list)  # [E] and its page id


PADDING_SLOT = 0


class PageTableMirror:
    """The host's record of a device table [max_slots, width]: who holds which slot, and how
    many pages of each holder's block table are on the device already.

    A request's block table only grows while it lives (BlockManager.ensure), so a step
    normally writes only its new tail. As a cheap check that a table is still the one written
    (the same length or longer, the same page at the last known column), the last page written
    to each slot is kept; a table that fails it has its whole row written again."""

    def __init__(self, max_slots: int) -> None:
        """`max_slots` to start with; more are made when every one is held (_grow)."""
        if max_slots < 2:
            raise ValueError(f"a page table needs 2 slots or more (slot 0 pads), got {max_slots}")
        self.max_slots = max_slots
        self._slot_of: dict[str, int] = {}
        self._free = list(range(max_slots - 1, PADDING_SLOT, -1))  # pop() gives the lowest
        self._known = [0] * max_slots  # per slot: its holder's pages written to the device
        self._last = [-1] * max_slots  # per slot: the last of them

    @property
    def num_held(self) -> int:
        return len(self._slot_of)

    def slot_of(self, owner: str) -> int | None:
        return self._slot_of.get(owner)

    def update(
        self,
        owners: list[str],
        block_tables: list[list[int]],
        context_lens: list[int],
        block_size: int,
        rows: int,
    ) -> PageTableUpdate:
        """The step's slot per row (`rows` ≥ len(owners): the rest pad) and the entries to
        write so that each slot holds the pages its owner's context needs now. The record
        counts them as written: apply the update before the next call."""
        slot_ids: list[int] = []
        slots: list[int] = []
        columns: list[int] = []
        pages: list[int] = []
        known, last = self._known, self._last
        for owner, table, ctx in zip(owners, block_tables, context_lens, strict=True):
            slot = self._slot_of.get(owner)
            if slot is None:
                slot = self._take(owner)
            have = known[slot]
            if have and (have > len(table) or table[have - 1] != last[slot]):
                have = 0  # not the table written: write the whole row again
            need = -(-ctx // block_size)
            if need > have:
                tail = table[have:need]
                if len(tail) != need - have:
                    raise ValueError(
                        f"request {owner!r}: a context of {ctx} tokens needs {need} KV pages, "
                        f"its block table has {len(table)}"
                    )
                slots.extend([slot] * len(tail))
                columns.extend(range(have, need))
                pages.extend(tail)
                known[slot] = need
                last[slot] = tail[-1]
            slot_ids.append(slot)
        slot_ids.extend([PADDING_SLOT] * (rows - len(owners)))
        return PageTableUpdate(slot_ids, slots, columns, pages)

    def release(self, owner: str) -> None:
        """`owner` has ended: its slot goes back (a no-op for an owner without one)."""
        slot = self._slot_of.pop(owner, None)
        if slot is not None:
            self._known[slot] = 0
            self._last[slot] = -1
            self._free.append(slot)

    def _take(self, owner: str) -> int:
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._slot_of[owner] = slot
        return slot

    def _grow(self) -> None:
        """Every slot is held: twice as many (the device table grows to match before the
        update is applied: XqaPageTable)."""
        old, self.max_slots = self.max_slots, 2 * self.max_slots
        self._known.extend([0] * old)
        self._last.extend([-1] * old)
        self._free = list(range(self.max_slots - 1, old - 1, -1)) + self._free
