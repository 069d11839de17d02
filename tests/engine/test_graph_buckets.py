"""The decode graphs' batch buckets (engine/cuda_graphs.py): a step replays the smallest bucket
that holds its rows, so the padding a large step carries is what the buckets' spacing allows.
Above ~200 rows a padding row costs a 3B backbone's GEMMs about what a real row does."""

from engine.cuda_graphs import DEFAULT_BUCKETS, PerBucketGraphs
from engine.llm_graphs import buckets_up_to


class Buckets(PerBucketGraphs):
    def __init__(self, buckets: tuple[int, ...]) -> None:
        self.buckets = buckets


def test_large_steps_carry_at_most_15_padding_rows_up_to_320():
    graphs = Buckets(DEFAULT_BUCKETS)
    for rows in range(128, 321):
        assert 0 <= graphs.bucket_for(rows) - rows <= 15, rows
    assert graphs.bucket_for(257) == 272 and graphs.bucket_for(513) is None


def test_a_server_captures_up_to_its_max_num_seqs():
    assert buckets_up_to(300) == tuple(b for b in DEFAULT_BUCKETS if b < 300) + (300,)
    assert Buckets(buckets_up_to(300)).bucket_for(290) == 300
