"""User audio in the decoder's prompt: each audio embedding gets a token id of its own past
the vocabulary (a "slot"), so that the engine's prompts stay plain token ids and a
conversation's kept KV prefix is matched by id as for text.

The table of slots lives with the model (one tensor, allocated once, so CUDA graphs can read
it). A turn's embeddings are placed when its prompt is built and stay where they are while the
conversation goes on: the next turn's prompt gives the earlier turn the same ids, so its KV
prefix is reused. The table is a ring: a new turn that does not fit after the last one starts
again at slot 0 and evicts the turns it overlaps. An evicted turn that comes back (its
conversation's next prompt) is placed again at new ids; its ids then differ from the kept
prefix, which is recomputed from there: correct, only slower. Turns must not be evicted
while their prompt is still being prefilled, which holds while the table is larger than the
audio of all prompts admitted between two steps (the default: 16384 slots, 22 minutes of
speech at 12.5 a second)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import torch

from models.base import ModelInputError

DEFAULT_SLOTS = 16384


class AudioSlots:
    def __init__(
        self, vocab_size: int, capacity: int, width: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.base = vocab_size  # slot s is token id base + s
        self.capacity = capacity
        self.table = torch.zeros(capacity, width, device=device, dtype=dtype)
        self._placed: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()  # key → (start, n)
        self._next = 0

    def ids_for(self, key: Hashable, embeds: torch.Tensor) -> list[int]:
        """The token ids of a turn's embeddings [n, width], placing them if they are not."""
        n = int(embeds.shape[0])
        hit = self._placed.get(key)
        if hit is not None and hit[1] == n:
            return list(range(self.base + hit[0], self.base + hit[0] + n))
        if n > self.capacity:
            raise ModelInputError(
                f"the turn's audio gives {n} embeddings; the model holds {self.capacity} "
                "slots: send shorter turns"
            )
        if self._next + n > self.capacity:
            self._next = 0
        start, end = self._next, self._next + n
        for other, (s, m) in list(self._placed.items()):
            if s < end and start < s + m:
                del self._placed[other]
        self.table[start:end] = embeds.to(self.table.device, self.table.dtype)
        self._placed[key] = (start, n)
        self._next = end
        return list(range(self.base + start, self.base + end))

    def embed(self, ids: torch.Tensor, embed_tokens: torch.nn.Embedding) -> torch.Tensor:
        """ids [T] (vocabulary ids and slot ids mixed) → input embeddings [T, width], with
        gathers and a select only (fixed shapes, no host sync: CUDA-graph safe)."""
        is_slot = ids >= self.base
        text = embed_tokens(ids.clamp(max=self.base - 1))
        audio = self.table[(ids - self.base).clamp(0, self.capacity - 1)]
        return torch.where(is_slot[:, None], audio.to(text.dtype), text)
