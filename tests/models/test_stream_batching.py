"""Batch buckets of the streaming codecs: what a call of n streams pads to on CUDA, and that the
start-up warm-up runs exactly the shapes serving will take (CPU, tiny Mimi)."""

from __future__ import annotations

import numpy as np

from models.codecs.mimi import MimiDetokenizer
from models.codecs.mimi_encoder_streaming import MimiStreamEncoder
from models.codecs.stream_batching import buckets_up_to, padded_batch
from tests.models.test_mimi import tiny_mimi


def test_padded_batch_is_the_smallest_bucket_that_holds_n():
    assert [padded_batch(n) for n in (1, 2, 3, 5, 64, 65, 256, 257, 600)] == [
        1,
        2,
        4,
        8,
        64,
        128,
        256,
        512,
        768,
    ]
    assert buckets_up_to(1) == [1]
    assert buckets_up_to(48) == [1, 2, 4, 8, 16, 32, 64]
    assert buckets_up_to(300) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def _record_batches(module, method: str) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    inner = getattr(module, method)

    def spy(x, *args, **kwargs):
        seen.append(tuple(x.shape))
        return inner(x, *args, **kwargs)

    setattr(module, method, spy)
    return seen


def test_warm_up_runs_every_padded_shape_serving_takes():
    mimi = tiny_mimi(seed=5)
    det = MimiDetokenizer(mimi, first_chunk_frames=1, chunk_frames=2, num_codebooks=8)
    enc = MimiStreamEncoder(mimi, 8)
    det.pad_batches = enc.pad_batches = True  # as on CUDA
    decoded = _record_batches(det.decoder, "decode_step")
    encoded = _record_batches(enc.encoder, "encode_step")
    det.warm_up_batches(5, frames=(1, 2))
    enc.warm_up_batches(5)
    warmed_dec, warmed_enc = set(decoded), set(encoded)
    assert {(s[0], s[2]) for s in warmed_dec} == {(b, n) for b in (1, 2, 4, 8) for n in (1, 2)}
    assert {s[0] for s in warmed_enc} == {1, 2, 4, 8}

    # Serving 3 and then 5 streams takes only warmed shapes.
    decoded.clear()
    encoded.clear()
    streams = [det.new_stream() for _ in range(5)]
    rng = np.random.default_rng(0)
    for stream in streams[:3]:
        det.push(stream, rng.integers(0, 2048, size=(2, 8)).tolist())
    for stream in streams[3:]:
        det.push(stream, rng.integers(0, 2048, size=(1, 8)).tolist())
    audio = det.decode(streams)
    assert [len(a) for a in audio] == [2 * 1920] * 3 + [1920] * 2
    inputs = [enc.new_stream() for _ in range(5)]
    codes = enc.encode(inputs, [np.zeros(1920, np.float32)] * 5)
    assert [c.shape for c in codes] == [(1, 8)] * 5
    assert set(decoded) <= warmed_dec and set(encoded) <= warmed_enc
    assert {s[0] for s in decoded} == {4, 2} and {s[0] for s in encoded} == {8}
