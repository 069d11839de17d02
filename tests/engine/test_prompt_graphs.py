"""Fresh prompts through the prompt graphs' static buffers (engine/prompt_graphs.py) give the
hidden states and KV writes of the paged forward, several prompts packed in one padded step;
padding touches only the scratch page; chunks that read the cache are refused."""

from __future__ import annotations

import pytest
import torch

from engine.attention import KVCache, SdpaBackend, StepLayout
from engine.prompt_graphs import PromptAttention, PromptGraphs
from models.orpheus.loading import load_orpheus

BLOCK = 4
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model(tiny_orpheus_dirs):
    model_dir, codec_dir = tiny_orpheus_dirs
    return load_orpheus(str(model_dir), str(codec_dir), CPU, torch.float32)


def new_cache(model, blocks: int = 16) -> KVCache:
    s = model.shape
    return KVCache(s.num_layers, blocks, BLOCK, s.num_kv_heads, s.head_dim, s.dtype, CPU)


def fresh_layout(lengths: list[int], tables: list[list[int]]) -> StepLayout:
    slots = [
        t[p // BLOCK] * BLOCK + p % BLOCK
        for n, t in zip(lengths, tables, strict=True)
        for p in range(n)
    ]
    return StepLayout(list(lengths), list(lengths), slots, tables, BLOCK)


def prompt_graphs(model, cache: KVCache) -> PromptGraphs:
    s = model.shape
    attn = PromptAttention(cache, s.num_q_heads, max_tokens=32)
    return PromptGraphs(model.forward, attn, s.hidden_size, s.dtype, CPU, BLOCK, buckets=(8, 32))


def test_packed_prompts_equal_the_paged_forward(model):
    lengths, tables = [5, 9, 3], [[3, 7], [1, 0, 12], [5]]
    layout = fresh_layout(lengths, tables)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.shape.vocab_size, (sum(lengths),), generator=generator)
    positions = [p for n in lengths for p in range(n)]

    paged_cache = new_cache(model)
    sdpa = SdpaBackend(paged_cache)
    sdpa.prepare(layout)
    expected = model.forward(ids, torch.tensor(positions), sdpa)

    cache = new_cache(model)
    graphs = prompt_graphs(model, cache)
    hidden = graphs.run(ids, positions, layout)  # 17 tokens, padded to the bucket of 32

    torch.testing.assert_close(hidden, expected, atol=1e-5, rtol=1e-5)
    slots = torch.tensor(layout.slot_mapping)
    scratch = cache.scratch_block * BLOCK
    written = torch.zeros(cache.k[0].shape[0], dtype=torch.bool)
    written[slots] = True
    for layer in range(model.shape.num_layers):
        for mine, theirs in (
            (cache.k[layer], paged_cache.k[layer]),
            (cache.v[layer], paged_cache.v[layer]),
        ):
            torch.testing.assert_close(mine[slots], theirs[slots])
            # Padding wrote the scratch page only: every other slot is as it was (zero).
            untouched = ~written
            untouched[scratch : scratch + BLOCK] = False
            assert not mine[untouched].any()
            assert mine[scratch].any()  # the padding's k/v went there


def test_a_prompt_alone_in_the_smallest_bucket(model):
    layout = fresh_layout([6], [[2, 4]])
    ids = torch.arange(6) + 10
    cache, paged_cache = new_cache(model), new_cache(model)
    sdpa = SdpaBackend(paged_cache)
    sdpa.prepare(layout)
    expected = model.forward(ids, torch.arange(6), sdpa)
    hidden = prompt_graphs(model, cache).run(ids, list(range(6)), layout)
    torch.testing.assert_close(hidden, expected, atol=1e-5, rtol=1e-5)


def test_chunks_that_read_the_cache_or_overflow_are_refused(model):
    attn = PromptAttention(new_cache(model), model.shape.num_q_heads, max_tokens=32)
    continuing = StepLayout([4], [8], [8, 9, 10, 11], [[1, 2]], BLOCK)  # tokens 4-7 of a prompt
    with pytest.raises(ValueError, match="first token"):
        attn.prepare(continuing, graph_batch=8)
    with pytest.raises(ValueError, match="does not fit"):
        attn.prepare(fresh_layout([40], [list(range(10))]), graph_batch=32)
    graphs = prompt_graphs(model, new_cache(model))
    with pytest.raises(ValueError, match="exceed the largest prompt graph"):
        graphs.run(
            torch.zeros(33, dtype=torch.long), list(range(33)), fresh_layout([33], [list(range(9))])
        )
