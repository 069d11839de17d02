"""gateway/duplex.py's ModelFrames: the user's decoded audio crosses to the engine in whole
model frames, in order, with nothing lost or repeated."""

from __future__ import annotations

import numpy as np

from gateway.duplex import ModelFrames


def test_pieces_come_out_as_whole_frames_in_order():
    frames = ModelFrames(samples_per_frame=8)
    audio = np.arange(60, dtype=np.float32)
    sizes = [5, 0, 3, 12, 1, 7, 20, 12]  # wire packets decode to uneven pieces, some empty
    out, at = [], 0
    for size in sizes:
        whole = frames.add(audio[at : at + size])
        at += size
        assert len(whole) % 8 == 0 and whole.dtype == np.float32
        out.append(whole)
    joined = np.concatenate(out)
    assert len(joined) == 56  # 60 samples: 7 whole frames, 4 samples wait for the next piece
    np.testing.assert_array_equal(joined, audio[:56])
    assert [len(w) for w in out] == [0, 0, 8, 8, 0, 8, 24, 8]


def test_a_cleared_remainder_does_not_reach_the_next_conversation():
    frames = ModelFrames(samples_per_frame=4)
    assert len(frames.add(np.ones(3, np.float32))) == 0
    frames.clear()
    np.testing.assert_array_equal(frames.add(np.zeros(4, np.float32)), np.zeros(4, np.float32))
