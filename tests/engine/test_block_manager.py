from engine.block_manager import BlockManager


def test_allocate_grow_and_free_returns_every_page():
    bm = BlockManager(num_blocks=8, block_size=4)
    assert bm.ensure("a", 5)  # 2 pages
    assert bm.ensure("b", 4)  # 1 page
    assert bm.num_used == 3
    assert bm.ensure("a", 9)  # grows to 3 pages
    assert len(bm.table("a")) == 3
    bm.free("a")
    bm.free("b")
    assert bm.num_free == 8 and bm.num_used == 0


def test_slots_follow_the_block_table():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.ensure("x", 1)
    bm.ensure("y", 1)
    bm.ensure("x", 6)  # x = [0, 2], y = [1]
    assert bm.table("x") == [0, 2]
    assert bm.slots("x", 3, 6) == [3, 8, 9]


def test_growth_beyond_the_pool_fails_without_side_effects():
    bm = BlockManager(num_blocks=2, block_size=4)
    assert bm.ensure("a", 4)
    assert not bm.ensure("a", 13)
    assert bm.table("a") == [bm.table("a")[0]] and bm.num_used == 1


def test_admission_names_the_reason():
    bm = BlockManager(num_blocks=4, block_size=16)
    too_big = bm.can_admit(16 * 5)
    assert not too_big.ok and "lower max_tokens" in too_big.reason
    committed = bm.can_admit(16 * 2, reserved_blocks=3)
    assert not committed.ok and "retry later" in committed.reason
    assert bm.can_admit(16 * 2, reserved_blocks=2).ok


# --- conversations: kept prefixes ------------------------------------------------------------
def test_kept_prefix_is_claimed_up_to_the_common_prefix_and_the_rest_freed():
    bm = BlockManager(num_blocks=8, block_size=4)
    assert bm.ensure("turn1", 11)  # 3 pages
    pages = bm.table("turn1")
    bm.keep("turn1", "conv", list(range(10)))  # tokens 0..9 have KV: 3 pages kept
    assert bm.table("turn1") == [] and bm.num_kept_blocks == 3 and bm.num_used == 3
    # The next prompt shares tokens 0..5, then differs (a reply truncated on barge-in).
    reused = bm.claim("conv", "turn2", [0, 1, 2, 3, 4, 5, 99, 98, 97])
    assert reused == 6
    assert bm.table("turn2") == pages[:2]  # the page with the first difference is rewritten
    assert bm.num_kept_blocks == 0 and bm.num_used == 2 and bm.kept("conv") is None
    assert bm.claim("conv", "turn3", [0, 1, 2]) == 0  # claimed once: nothing kept any more


def test_claim_leaves_the_last_prompt_token_to_compute_and_skips_other_conversations():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure("a", 8)
    bm.keep("a", "conv", list(range(8)))
    assert bm.claim("other", "b", list(range(8))) == 0 and bm.num_kept_blocks == 2
    assert bm.claim("conv", "b", list(range(8))) == 7  # the 8th is run for its logits
    assert len(bm.table("b")) == 2


def test_keep_frees_pages_without_kv_and_replaces_an_older_prefix():
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.ensure("a", 16)  # 4 pages reserved and grown, only 5 tokens computed
    bm.keep("a", "conv", [1, 2, 3, 4, 5])
    assert bm.num_kept_blocks == 2 and bm.num_used == 2
    bm.ensure("b", 4)
    bm.keep("b", "conv", [7, 7, 7])
    assert bm.kept("conv").token_ids == [7, 7, 7] and bm.num_used == 1
    bm.keep("c", "conv", [])  # nothing computed: nothing kept
    assert bm.kept("conv") is None and bm.num_used == 0


def test_idle_conversations_are_evicted_least_recently_kept_first():
    bm = BlockManager(num_blocks=6, block_size=4)
    for conv in ("old", "mid", "new"):
        bm.ensure(conv, 8)
        bm.keep(conv, conv, list(range(8)))
    assert bm.num_kept_blocks == 6 and bm.num_free == 0
    assert bm.evict_for(reserved_blocks=0) == []  # all fit beside no reservation
    assert bm.evict_for(reserved_blocks=3) == ["old", "mid"]
    assert bm.kept("new") is not None and bm.num_free == 4
    assert bm.ensure("live", 12)  # the reservation's pages are there
    bm.drop_kept("new")
    bm.free("live")
    assert bm.num_free == 6 and bm.num_kept_blocks == 0
