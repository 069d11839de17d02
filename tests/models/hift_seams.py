"""How far a served flow + HiFT stream may be from the whole decode: HiFT's seams."""

from __future__ import annotations

import numpy as np

# HiFT is not causal, and its receptive field reaches 12 mel frames either side; a served
# stream gives it 8 (the look-ahead costs latency), so its seams differ from a whole decode.
# With audible random weights (models/codecs/flow_hift/audible_weights.py: unrelated tokens
# differ by ~25 % of the signal) the seams measured up to ~15 % of the signal's RMS at a sample
# and 0.2 % over an utterance. With 12 frames each side the stream is the whole decode to fp32
# rounding (test_flow_hift.py, test_with_context_over_hifts_reach_the_stream_is_the_whole_decode):
# that test carries the exactness; these bounds say the served seams stay seams.
SEAM_MAX = 0.2
SEAM_RMS = 0.005


def assert_within_seams(got: np.ndarray, ref: np.ndarray, rms_bound: float = SEAM_RMS) -> None:
    """`rms_bound`: a larger one where more than HiFT's seams differ (Chatterbox's flow
    attends past a streamed chunk's look-ahead in a whole decode)."""
    assert got.shape == ref.shape
    rms = np.sqrt(np.mean(ref**2))
    err = np.abs(got - ref)
    assert err.max() <= SEAM_MAX * rms, err.max() / rms
    assert np.sqrt(np.mean(err**2)) <= rms_bound * rms, np.sqrt(np.mean(err**2)) / rms
