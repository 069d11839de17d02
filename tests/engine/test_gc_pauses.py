"""The garbage collector in a serving process: start-up objects frozen out of full collections
(and thawed again by the next engine's start-up), and every collection timed for /metrics."""

import gc
import weakref

import pytest

from engine.gc_pauses import PAUSE_BUCKETS_S, GcPauses, freeze_loaded
from gateway.metrics import GatewayMetrics
from voxbench.servers import describe_pauses, parse_server_pauses, pauses_between


class Node:
    """An object in a reference cycle: only the collector can free it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()  # leave the test process as it was


def test_freeze_keeps_start_up_objects_out_of_full_collections_until_the_next_freeze(thawed):
    node = Node()
    alive = weakref.ref(node)
    assert freeze_loaded() >= 1 and gc.get_freeze_count() >= 1
    del node  # now garbage, but frozen: a full collection no longer looks at it
    gc.collect()
    assert alive() is not None
    # The next engine's start-up thaws the old one's objects first, so their cycles go.
    freeze_loaded()
    assert alive() is None


def test_every_collection_is_timed_by_generation():
    pauses = GcPauses().install()
    try:
        before = pauses.snapshot()
        for _ in range(3):
            Node()
            gc.collect()
        after = pauses.snapshot()
    finally:
        pauses.uninstall()
    full = after[2]
    assert full.count >= before[2].count + 3
    assert full.total_s > before[2].total_s and 0 < full.max_s <= full.total_s
    # Cumulative per bound, never more than all collections.
    assert full.le_counts == sorted(full.le_counts) and full.le_counts[-1] <= full.count
    assert len(full.le_counts) == len(PAUSE_BUCKETS_S)
    gc.collect()  # uninstalled: no longer counted
    assert pauses.snapshot()[2].count == full.count


def test_metrics_show_full_collections_and_the_bench_reads_them_back():
    metrics = GatewayMetrics(lambda: None)
    first = parse_server_pauses(metrics.render().decode())
    for _ in range(2):
        gc.collect()
    metrics.loop_lag.observe(0.03)  # what gateway.loop_lag's probe records
    metrics.loop_lag.observe(0.15)
    metrics.observe_encode(0.05, 0.002, True)  # an encode that waited, then ran hurried
    metrics.observe_encode(0.001, 0.004, False)
    metrics.audio_delivery.observe(0.12)  # a chunk that took 120 ms from engine to socket
    between = pauses_between(first, parse_server_pauses(metrics.render().decode()))
    full = between["full_gc"]
    assert full["count"] >= 2 and full["ms"] > 0
    assert 0 <= full["over_100ms"] <= full["over_20ms"] <= full["count"]
    assert between["loop_lag"] == {"count": 2, "over_20ms": 2, "over_100ms": 1, "ms": 180.0}
    assert between["encode_queue"]["count"] == 2 and between["encode_run"]["count"] == 2
    assert between["encode_hurried"] == {"count": 1, "over_20ms": 1, "over_100ms": 0, "ms": 50.0}
    assert between["audio_delivery"] == {"count": 1, "over_20ms": 1, "over_100ms": 1, "ms": 120.0}
    lines = describe_pauses(between)  # the bench's log, a line a histogram
    assert (
        lines[0] == "server event-loop lag samples: 2, 2 over 20 ms, 1 over 100 ms, 180 ms in all"
    )
    assert len(lines) == 6 and describe_pauses(None) == []
    assert "server chunks from engine to socket: 1, 1 over 20 ms, 1 over 100 ms" in lines[-1]
    assert parse_server_pauses("voxgate_sessions 0\n") == {}  # a server without them
    assert pauses_between(None, first) is None
