"""XQA's page table, kept per request on the device and gathered into row order each step
(engine/xqa_page_table.py, engine/page_table_mirror.py), on CPU tensors: it must equal the
dense table rebuilt from the block tables wherever the kernel reads it."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from engine.attention import SdpaBackend, StepLayout
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.page_table_mirror import PageTableMirror
from engine.request import SamplingParams
from engine.xqa_page_table import XqaPageTable
from models.registry import load_model

BS = 4  # tokens a page: small, so that decodes cross pages often
SCRATCH = 999
CPU = torch.device("cpu")


def decode_layout(owners, tables, context_lens, with_owners=True):
    return StepLayout(
        query_lens=[1] * len(owners),
        context_lens=list(context_lens),
        slot_mapping=[],  # not read by the page table
        block_tables=[list(t) for t in tables],
        block_size=BS,
        owners=list(owners) if with_owners else [],
    )


def assert_reads_alike(gathered: XqaPageTable, dense: XqaPageTable, layout, rows):
    """Every entry the kernel reads is the same: each row's pages up to its length, one
    token of the scratch page for padding rows, and the lengths."""
    for row, ctx in enumerate(layout.context_lens):
        pages = -(-ctx // BS)
        assert torch.equal(gathered.page_table[row, :pages], dense.page_table[row, :pages]), row
    for row in range(len(layout.context_lens), rows):
        assert gathered.page_table[row].eq(SCRATCH).all()
        assert dense.page_table[row, 0] == SCRATCH
    assert torch.equal(gathered.seq_lens[:rows], dense.seq_lens[:rows])


def test_gathered_table_equals_dense_rebuild_over_a_random_run():
    """Requests arrive, grow, sit steps out, come in a new order each step, finish (their
    slots reused by later ones), and some start from a conversation's kept pages; graph
    buckets pad the steps."""
    rng = random.Random(7)
    blocks = BlockManager(num_blocks=3000, block_size=BS)
    gathered = XqaPageTable(32, 64, SCRATCH, CPU, max_slots=40)
    dense = XqaPageTable(32, 64, SCRATCH, CPU)
    live: dict[str, int] = {}  # owner → tokens in the cache after its next step
    prompts: dict[str, list[int]] = {}
    kept: list[tuple[str, list[int]]] = []  # conversations with kept pages, and their tokens
    reused = 0
    for step in range(400):
        for _ in range(rng.choice([0, 0, 0, 1, 2])):  # arrivals
            if len(live) >= 30:
                break
            owner = f"r{step}-{len(live)}"
            prompt = [rng.randrange(50) for _ in range(rng.randrange(2, 100))]
            if kept and rng.random() < 0.5:  # a conversation's next turn: a common prefix
                conversation, tokens = kept.pop()
                prompt = tokens[: rng.randrange(min(len(tokens), 100))] + prompt
                reused += blocks.claim(conversation, owner, prompt) > 0
            assert blocks.ensure(owner, len(prompt) + 1)
            live[owner], prompts[owner] = len(prompt) + 1, prompt
        owners = [o for o in live if rng.random() < 0.8]  # the rest sit this step out
        rng.shuffle(owners)
        owners = owners[:32]
        if not owners:
            continue  # (no decode step without requests)
        for owner in owners:
            assert blocks.ensure(owner, live[owner])
        tables = [blocks.table(o) for o in owners]
        contexts = [live[o] for o in owners]
        rows = len(owners) + rng.choice([0, 0, 1, 5])
        rows = min(max(rows, 1), 32)
        gathered.write(decode_layout(owners, tables, contexts), rows)
        dense.write(decode_layout(owners, tables, contexts, with_owners=False), rows)
        assert_reads_alike(gathered, dense, decode_layout(owners, tables, contexts), rows)
        for owner in owners:
            live[owner] += 1
        for owner in [o for o in live if rng.random() < 0.03 or live[o] > 240]:  # finishes
            generated = live.pop(owner) - 1 - len(prompts[owner])
            if rng.random() < 0.3:  # its pages kept for its conversation's next request
                tokens = prompts.pop(owner) + [rng.randrange(50) for _ in range(generated)]
                blocks.keep(owner, f"c-{owner}", tokens)
                kept.append((f"c-{owner}", tokens))
                if len(kept) > 4:
                    blocks.drop_kept(kept.pop(0)[0])
            else:
                blocks.free(owner)
            gathered.release(owner)
    assert reused > 0  # conversations' kept prefixes were claimed
    assert gathered.mirror.num_held == len(live)


def test_a_decode_writes_only_the_page_it_opens():
    mirror = PageTableMirror(4)
    first = mirror.update(["a", "b"], [[5, 6], [7]], [8, 3], BS, rows=4)
    assert first.slot_ids == [1, 2, 0, 0]  # padding rows read slot 0
    assert (first.slots, first.columns, first.pages) == ([1, 1, 2], [0, 1, 0], [5, 6, 7])
    same_pages = mirror.update(["b", "a"], [[7], [5, 6]], [4, 8], BS, rows=2)
    assert same_pages.slot_ids == [2, 1] and same_pages.pages == []
    opens = mirror.update(["a"], [[5, 6, 9]], [9], BS, rows=1)
    assert (opens.slots, opens.columns, opens.pages) == ([1], [2], [9])


def test_a_replaced_or_shrunk_table_is_written_again():
    table = XqaPageTable(4, 8, SCRATCH, CPU, max_slots=4)
    dense = XqaPageTable(4, 8, SCRATCH, CPU)
    for pages, ctx in [
        ([1, 2, 3], 12),
        ([7, 8], 8),  # shorter than what was written
        ([7, 9, 10], 12),  # the last page written (8, column 1) is not there any more
        ([7, 9, 10, 11], 13),
    ]:
        layout = decode_layout(["a"], [pages], [ctx])
        table.write(layout, 2)
        dense.write(decode_layout(["a"], [pages], [ctx], with_owners=False), 2)
        assert_reads_alike(table, dense, layout, 2)


def test_a_released_slot_goes_to_a_new_request_written_from_its_first_page():
    table = XqaPageTable(4, 8, SCRATCH, CPU, max_slots=2)
    table.write(decode_layout(["a"], [[1, 2, 3, 4]], [16]), 1)
    table.release("a")
    table.write(decode_layout(["b"], [[6]], [2]), 1)
    assert table.mirror.slot_of("b") == 1
    assert table.page_table[0, 0] == 6 and table.seq_lens[0] == 2


def test_more_live_requests_than_slots_grow_the_table():
    table = XqaPageTable(4, 8, SCRATCH, CPU, max_slots=3)  # slot 0 pads: two requests fit
    table.write(decode_layout(["a", "b"], [[1], [2]], [1, 1]), 2)
    table.write(decode_layout(["c", "a"], [[3, 4], [1]], [5, 2]), 2)
    assert table.mirror.max_slots == 6 and table.by_slot.shape == (6, 8)
    assert table.page_table[:2, :2].tolist() == [[3, 4], [1, SCRATCH]]
    assert table.by_slot[2, 0] == 2  # b's row survived the move
    table.release("a")
    assert table.mirror.update(["d"], [[5]], [1], BS, rows=1).slot_ids == [1]


def test_a_block_table_short_of_its_context_is_refused():
    mirror = PageTableMirror(3)
    with pytest.raises(ValueError, match="needs 3 KV pages"):
        mirror.update(["a"], [[1, 2]], [9], BS, rows=1)


def test_a_layout_without_owners_keeps_the_dense_rebuild():
    table = XqaPageTable(4, 8, SCRATCH, CPU, max_slots=2)
    table.write(decode_layout(["a", "b"], [[1, 2], [3]], [5, 2], with_owners=False), 3)
    assert table.mirror.num_held == 0
    assert table.page_table[:3, :2].tolist() == [[1, 2], [3, SCRATCH], [SCRATCH, SCRATCH]]
    assert table.seq_lens[:3].tolist() == [5, 2, 1]


class CheckedSdpa(SdpaBackend):
    """SDPA, which also writes each decode step's XQA page table both ways and compares them:
    the engine's own layouts, orders and releases (finish, cancel) drive the gathered one."""

    def __init__(self, cache) -> None:
        super().__init__(cache)
        self.gathered = XqaPageTable(16, 64, cache.scratch_block, CPU, max_slots=8)
        self.dense = XqaPageTable(16, 64, cache.scratch_block, CPU)
        self.decode_steps = 0
        self.released: list[str] = []

    def prepare(self, layout, graph_batch=None) -> None:
        super().prepare(layout, graph_batch)
        if not all(n == 1 for n in layout.query_lens):
            return
        rows = graph_batch or len(layout.query_lens)
        self.gathered.write(layout, rows)
        self.dense.write(dataclasses.replace(layout, owners=[]), rows)
        for row, ctx in enumerate(layout.context_lens):
            pages = -(-ctx // layout.block_size)
            assert torch.equal(
                self.gathered.page_table[row, :pages], self.dense.page_table[row, :pages]
            )
        assert torch.equal(self.gathered.seq_lens[:rows], self.dense.seq_lens[:rows])
        self.decode_steps += 1

    def release(self, owner: str) -> None:
        self.released.append(owner)
        self.gathered.release(owner)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_engine_names_each_steps_requests_and_releases_them_when_they_end(
    async_scheduling,
):
    model = load_model("tiny-orpheus")
    config = EngineConfig(
        num_kv_blocks=128, block_size=8, max_num_seqs=4, async_scheduling=async_scheduling
    )
    core = EngineCore(model, config, CPU, "sdpa")
    checked = core.worker.attn = CheckedSdpa(core.worker.cache)
    sampling = SamplingParams(max_tokens=40, min_tokens=40)
    ids = [core.add_request(SpeechRequest(f"Hello number {i}.", sampling=sampling)).request_id
           for i in range(7)]  # fmt: skip
    for step in range(200):
        if not core.has_work():
            break
        core.step()
        if step == 10:
            core.cancel(ids[2])
    assert checked.decode_steps > 20
    assert sorted(checked.released) == sorted(ids)  # once each
    assert checked.gathered.mirror.num_held == 0
