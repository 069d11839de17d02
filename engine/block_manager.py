"""Paged KV-cache bookkeeping: integers only, no torch.

The cache is a pool of fixed-size blocks (pages). A request owns a block table: the list of
block ids holding its tokens in order. Token i of a request lives in slot
`block_table[i // block_size] * block_size + i % block_size`; kernels see only slots.

Conversations (prefix reuse): when a request of a conversation ends, its pages can be *kept*
under the conversation id with the token ids whose KV they hold. The conversation's next
request *claims* them: it takes the pages of the longest common token prefix with its prompt
(the page holding the first differing token too: a kept prefix has one owner, so the rest of
that page is simply overwritten when those positions are computed) and the pages past it are
freed. That is also how a reply truncated on barge-in loses its unheard part. Kept pages are
held only while nobody needs them: `evict_for` drops idle conversations, least recently kept
first, so that live requests' reservations always fit.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from engine.refusal_causes import Admission, RefusalCause


@dataclass
class KeptPrefix:
    """An idle conversation's KV: `blocks` hold the KV of `token_ids`, in order."""

    token_ids: list[Any]  # the engine's tokens: ids, or rows of ids
    blocks: list[int]


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: deque[int] = deque(range(num_blocks))
        self._tables: dict[str, list[int]] = {}
        self._kept: OrderedDict[str, KeptPrefix] = OrderedDict()  # least recently kept first
        self._num_kept_blocks = 0

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

    @property
    def num_kept_blocks(self) -> int:
        """Pages held by idle conversations (evictable)."""
        return self._num_kept_blocks

    def kept(self, conversation_id: str) -> KeptPrefix | None:
        return self._kept.get(conversation_id)

    def can_admit(self, total_tokens: int, reserved_blocks: int = 0) -> Admission:
        """Can a request that will grow to `total_tokens` fit beside what is already promised?"""
        need = self.blocks_for(total_tokens)
        if need > self.num_blocks:
            return Admission(
                False,
                f"request needs {need} KV pages of {self.block_size} tokens but the pool has "
                f"only {self.num_blocks}; lower max_tokens or give the engine more KV memory",
                RefusalCause.KV,
            )
        if need + reserved_blocks > self.num_blocks:
            return Admission(
                False,
                "the KV cache is fully committed to running requests; retry later",
                RefusalCause.KV,
            )
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
        self._release(self._tables.pop(owner, []))

    def _release(self, blocks: list[int]) -> None:
        for block in reversed(blocks):
            self._free.appendleft(block)

    # --- conversations ---------------------------------------------------------------------------
    def keep(self, owner: str, conversation_id: str, token_ids: list[Any]) -> None:
        """`owner` ended: its pages holding `token_ids` (its first len(token_ids) tokens, whose
        KV is in the cache) are kept for the conversation's next request; the rest are freed.
        An older kept prefix of the same conversation is replaced."""
        table = self._tables.pop(owner, [])
        self.drop_kept(conversation_id)
        n = self.blocks_for(len(token_ids))
        self._release(table[n:])
        if n:
            self._kept[conversation_id] = KeptPrefix(list(token_ids), table[:n])
            self._num_kept_blocks += n

    def claim(self, conversation_id: str, owner: str, prompt_ids: list[Any]) -> int:
        """Start `owner`'s table with the conversation's kept pages that hold the longest
        common prefix of `prompt_ids` and the kept tokens; free the pages past it. Returns
        how many prompt tokens have their KV already. The last prompt token is always left to
        compute: its logits start the reply."""
        kept = self._kept.pop(conversation_id, None)
        if kept is None:
            return 0
        self._num_kept_blocks -= len(kept.blocks)
        limit = min(len(prompt_ids) - 1, len(kept.token_ids))
        reused = 0
        while reused < limit and prompt_ids[reused] == kept.token_ids[reused]:
            reused += 1
        n = self.blocks_for(reused)
        if self._tables.get(owner):
            raise RuntimeError(f"{owner} already holds KV pages; claim before it grows")
        self._tables[owner] = kept.blocks[:n]
        self._release(kept.blocks[n:])
        return reused

    def drop_kept(self, conversation_id: str) -> None:
        kept = self._kept.pop(conversation_id, None)
        if kept is not None:
            self._num_kept_blocks -= len(kept.blocks)
            self._release(kept.blocks)

    def evict_for(self, reserved_blocks: int) -> list[str]:
        """Free idle conversations' pages, least recently kept first, until they fit beside
        `reserved_blocks` (pages promised to live requests, which must never run out).
        Returns the evicted conversation ids."""
        evicted = []
        while self._kept and reserved_blocks + self._num_kept_blocks > self.num_blocks:
            conversation_id = next(iter(self._kept))
            self.drop_kept(conversation_id)
            evicted.append(conversation_id)
        return evicted

    def slots(self, owner: str, start: int, end: int) -> list[int]:
        """Cache slots of token positions [start, end) of `owner`."""
        table = self._tables[owner]
        bs = self.block_size
        return [table[pos // bs] * bs + pos % bs for pos in range(start, end)]
