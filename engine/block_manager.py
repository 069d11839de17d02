"""Paged KV-cache bookkeeping: integers only, no torch.

The cache is a pool of fixed-size blocks (pages). A request owns a block table: the list of
block ids holding its tokens in order. Token i of a request lives in slot
`block_table[i // block_size] * block_size + i % block_size`; kernels see only slots.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Admission:
    ok: bool
    reason: str = ""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._tables: dict[str, list[int]] = {}

    # --- queries -------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def table(self, owner: str) -> list[int]:
        return self._tables.get(owner, [])

    def can_admit(self, total_tokens: int, reserved_blocks: int = 0) -> Admission:
        """Can a request that will grow to `total_tokens` fit beside what is already promised?"""
        need = self.blocks_for(total_tokens)
        if need > self.num_blocks:
            return Admission(
                False,
                f"request needs {need} KV pages of {self.block_size} tokens but the pool has "
                f"only {self.num_blocks}; lower max_tokens or give the engine more KV memory",
            )
        if need + reserved_blocks > self.num_blocks:
            return Admission(False, "the KV cache is fully committed to running requests; retry later")
        return Admission(True)

    # --- mutations -------------------------------------------------------------------------------
    def ensure(self, owner: str, num_tokens: int) -> bool:
        """Grow `owner`'s table to hold `num_tokens` tokens. False (and no change) if the pool
        cannot supply the pages."""
        table = self._tables.setdefault(owner, [])
        missing = self.blocks_for(num_tokens) - len(table)
        if missing <= 0:
            return True
        if missing > len(self._free):
            return False
        table.extend(self._free.popleft() for _ in range(missing))
        return True

    def free(self, owner: str) -> None:
        for block in reversed(self._tables.pop(owner, [])):
            self._free.appendleft(block)

    def slots(self, owner: str, start: int, end: int) -> list[int]:
        """Cache slots of token positions [start, end) of `owner`."""
        table = self._tables[owner]
        bs = self.block_size
        return [table[pos // bs] * bs + pos % bs for pos in range(start, end)]
