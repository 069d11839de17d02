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
