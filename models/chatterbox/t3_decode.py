"""T3 with classifier-free guidance on the engine's paged KV cache: each request is two rows
(conditional, unconditional) with their own KV pages, prefilled and stepped in the same
forward, the next token chosen once from both rows' logits and fed back to both.

This is the model-side loop (the reference for the engine's scheduling, and the T3 half of
the parity test); the engine's scheduler does not yet pair rows (see docs/models.md)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention import KVCache, SdpaBackend, StepLayout
from models.chatterbox.config import SAMPLING, T3_FACTS
from models.chatterbox.sampling import T3Sampling, next_speech_token
from models.chatterbox.t3 import T3


@dataclass(frozen=True)
class T3Request:
    text_ids: list[int]  # start_text … stop_text
    speaker: torch.Tensor  # [256] voice-encoder embedding
    prompt_tokens: torch.Tensor  # [P] reference speech tokens
    exaggeration: float = SAMPLING.exaggeration
    max_new_tokens: int = SAMPLING.max_new_tokens


class PagedRows:
    """Block tables of a fixed set of rows over one KV cache (pages handed out in order)."""

    def __init__(self, cache: KVCache, rows: int) -> None:
        self.cache, self.lengths = cache, [0] * rows
        self.tables: list[list[int]] = [[] for _ in range(rows)]
        self._next_page = 0

    def layout(self, new_tokens: list[int]) -> StepLayout:
        size, slots = self.cache.block_size, []
        for row, n in enumerate(new_tokens):
            for pos in range(self.lengths[row], self.lengths[row] + n):
                if pos // size == len(self.tables[row]):
                    if self._next_page >= self.cache.num_blocks:
                        raise RuntimeError("the T3 KV cache is full; give it more blocks")
                    self.tables[row].append(self._next_page)
                    self._next_page += 1
                slots.append(self.tables[row][pos // size] * size + pos % size)
            self.lengths[row] += n
        return StepLayout(new_tokens, list(self.lengths), slots, self.tables, size)


@torch.inference_mode()
def generate_speech_tokens(
    model: T3,
    request: T3Request,
    rules: T3Sampling,
    generator: torch.Generator | None = None,
    block_size: int = 16,
) -> list[int]:
    """The speech tokens T3 generates for one request, the stop token left out (as
    ChatterboxTTS.generate drops it)."""
    device = model.speech_head.weight.device
    dtype = model.speech_head.weight.dtype
    text = torch.tensor(request.text_ids, device=device)
    cond = model.conditioning(
        request.speaker.to(device, dtype), request.prompt_tokens.to(device), request.exaggeration
    )
    rows = [model.prompt_embeddings(cond, text, unconditional=u) for u in (False, True)]
    prompt_len = rows[0].shape[0]
    sizes = model.sizes
    pages = -(-(prompt_len + request.max_new_tokens + 1) // block_size)
    cache = KVCache(
        sizes.layers, 2 * pages, block_size, sizes.kv_heads, T3_FACTS.head_dim, dtype, device
    )
    attn, paged = SdpaBackend(cache), PagedRows(cache, 2)

    attn.prepare(paged.layout([prompt_len, prompt_len]))
    positions = torch.arange(prompt_len, device=device)
    hidden = model(torch.cat(rows), torch.cat([positions, positions]), attn)
    last = hidden[[prompt_len - 1, 2 * prompt_len - 1]]

    seen = torch.zeros(1, sizes.speech_vocab, dtype=torch.bool, device=device)
    seen[0, T3_FACTS.start_speech] = True
    out: list[int] = []
    for i in range(request.max_new_tokens):
        logits = model.speech_logits(last)
        token = next_speech_token(logits[:1], logits[1:], seen, rules, generator)
        code = int(token[0])
        if code == T3_FACTS.stop_speech:
            break
        out.append(code)
        seen[0, code] = True
        x = model.speech_embeddings(token.expand(2), torch.full((2,), i + 1, device=device))
        attn.prepare(paged.layout([1, 1]))
        last = model(x, torch.full((2,), prompt_len + i, device=device), attn)
    return out
