"""T3 with classifier-free guidance on a paged KV cache, outside the engine: a request's two
rows as one sequence with stacked heads (guided.py), prefilled and stepped as the engine's
ChatterboxModel runs them, the next token chosen once from both rows' logits and fed back to
both. The offline path (synth.py) and the T3 half of the parity test."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.attention import KVCache, SdpaBackend, StepLayout
from models.chatterbox.config import SAMPLING, T3_FACTS
from models.chatterbox.guided import guided_forward
from models.chatterbox.sampling import T3Sampling, next_speech_token
from models.chatterbox.t3 import T3


@dataclass(frozen=True)
class T3Request:
    text_ids: list[int]  # start_text … stop_text
    speaker: torch.Tensor  # [256] voice-encoder embedding
    prompt_tokens: torch.Tensor  # [P] reference speech tokens
    exaggeration: float = SAMPLING.exaggeration
    max_new_tokens: int = SAMPLING.max_new_tokens


def prompt_rows(model: T3, request: T3Request) -> torch.Tensor:
    """The request's whole prompt for both rows [P, 2, H]."""
    device, dtype = model.speech_head.weight.device, model.speech_head.weight.dtype
    text = torch.tensor(request.text_ids, device=device)
    cond = model.conditioning(
        request.speaker.to(device, dtype), request.prompt_tokens.to(device), request.exaggeration
    )
    rows = [model.prompt_embeddings(cond, text, unconditional=u) for u in (False, True)]
    return torch.stack(rows, dim=1)


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
    device, dtype = model.speech_head.weight.device, model.speech_head.weight.dtype
    x = prompt_rows(model, request)
    prompt_len, sizes = x.shape[0], model.sizes
    pages = -(-(prompt_len + request.max_new_tokens) // block_size)
    kv_heads = 2 * sizes.kv_heads  # both rows' heads, stacked
    cache = KVCache(sizes.layers, pages, block_size, kv_heads, T3_FACTS.head_dim, dtype, device)
    attn, table = SdpaBackend(cache), list(range(pages))

    def step(x: torch.Tensor, start: int) -> torch.Tensor:
        n = x.shape[0]
        slots = [
            table[p // block_size] * block_size + p % block_size for p in range(start, start + n)
        ]
        attn.prepare(StepLayout([n], [start + n], slots, [table], block_size))
        positions = torch.arange(start, start + n, device=device)
        return guided_forward(model, x, positions, attn)[-1]  # [2, H]

    last = step(x, 0)
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
        if i + 1 == request.max_new_tokens:
            break
        emb = model.speech_embeddings(token, torch.full((1,), i + 1, device=device))
        last = step(emb[:, None].expand(1, 2, -1), prompt_len + i)
    return out
