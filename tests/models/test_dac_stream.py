"""The streaming DAC 44.1 kHz detokenizer: chunked output equals one whole decode, which equals
transformers' DacModel.decode, on seeded random weights (a narrow DAC with the published
strides, so 512 samples a frame and the published receptive field)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.codecs import dac as dac_module
from models.codecs.dac import GRAPH_ROWS, DacDetokenizer, make_audible
from models.zonos.presets import TINY_DAC
from tests.cpu_graphs import EagerGraphs
from tests.torch_threads import one_torch_thread

FRAMES = 40
# fp32 rounding of windows of other lengths, carried through ~30 unit-gain layers: measured
# 2e-5 of the peak.
ROUNDING = 1e-4


@pytest.fixture(autouse=True)
def one_thread():
    # Narrow convolutions: on a shared 2-core box a second thread only adds contention.
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def dac():
    from transformers import DacConfig, DacModel

    torch.manual_seed(3)
    return make_audible(DacModel(DacConfig(**TINY_DAC)).eval(), 3)


@pytest.fixture(scope="module")
def frames():
    g = torch.Generator().manual_seed(4)
    return torch.randint(0, 1024, (FRAMES, 9), generator=g).tolist()


def _streamed(detok: DacDetokenizer, frames: list[list[int]], sizes: list[int]) -> np.ndarray:
    stream, out, at, i = detok.new_stream(), [], 0, 0
    while at < len(frames):
        size = sizes[i % len(sizes)]
        detok.push(stream, frames[at : at + size])
        at, i = at + size, i + 1
        out.append(detok.decode([stream], [at >= len(frames)])[0])
    return np.concatenate(out)


def test_whole_decode_equals_transformers(dac, frames):
    detok = DacDetokenizer(dac)
    with torch.inference_mode():
        want = dac.decode(audio_codes=torch.tensor(frames).T[None]).audio_values[0].numpy()
    got = detok.decode_frames(frames)
    assert got.shape == (FRAMES * 512,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # the same modules, the same sums


@pytest.mark.parametrize("sizes", [[1], [3, 7, 2], [16]])
def test_chunked_equals_whole(dac, frames, sizes):
    detok = DacDetokenizer(dac)
    whole = detok.decode_frames(frames)
    got = _streamed(detok, frames, sizes)
    assert got.shape == whole.shape
    np.testing.assert_allclose(got, whole, rtol=0, atol=ROUNDING * np.abs(whole).max())


@pytest.mark.parametrize("context", [2, 8])
def test_short_context_breaks_the_seams(dac, frames, context):
    """The measured receptive field is real: less context (even 8 frames, short of the 9.3 it
    reaches) leaves seams well beyond the tolerance the full context meets."""
    whole = DacDetokenizer(dac).decode_frames(frames)
    short = _streamed(DacDetokenizer(dac, left=context, right=context), frames, [4])
    err = np.abs(short - whole).max() / np.abs(whole).max()
    assert err > 10 * ROUNDING


def test_bad_codes_are_refused(dac):
    detok = DacDetokenizer(dac)
    with pytest.raises(ValueError, match="9 codes"):
        detok.push(detok.new_stream(), [[1024] * 9])


def test_streams_decoded_together_equal_each_alone(dac, frames):
    """Windows of the same length share one batched decode; each stream's audio is its own."""
    detok = DacDetokenizer(dac)
    other = [list(reversed(f)) for f in frames]
    together = [detok.new_stream(), detok.new_stream()]
    got: list[list[np.ndarray]] = [[], []]
    for at in range(0, FRAMES, 5):
        detok.push(together[0], frames[at : at + 5])
        detok.push(together[1], other[at : at + 5])
        last = at + 5 >= FRAMES
        for i, audio in enumerate(detok.decode(together, [last, last])):
            got[i].append(audio)
    for i, source in enumerate((frames, other)):
        whole = detok.decode_frames(source)
        np.testing.assert_allclose(
            np.concatenate(got[i]), whole, rtol=0, atol=ROUNDING * np.abs(whole).max()
        )


@pytest.mark.parametrize(
    ("pushes", "top"), [([14, 16, 10], 32), ([14, 26], 32), ([20, 20], 32), ([14, 26], 2)]
)
def test_replayed_windows_stream_as_the_whole_decode(dac, frames, pushes, top, monkeypatch):
    """As on a GPU (EagerGraphs: the calls a replay runs): each stream's frames are cut on its
    chunk grid, each piece with its context, so that the windows of whole chunks (a backlog's
    too) have the captured lengths, several a stream in one call, rows padded to a bucket (in
    calls of the largest bucket beyond it: 2 rows here, the last case); the rest run eagerly.
    The audio still equals the whole decode."""
    monkeypatch.setattr(dac_module, "GRAPH_ROWS", tuple(b for b in GRAPH_ROWS if b <= top))
    graphs = EagerGraphs(deferred=True)  # traces only the keys that run
    detok = DacDetokenizer(dac)
    detok.enable_cuda_graphs(graphs)
    sources = [frames, [list(reversed(f)) for f in frames], frames[::-1]]
    streams = [detok.new_stream() for _ in sources]
    got: list[list[np.ndarray]] = [[] for _ in sources]
    at = 0
    for size in pushes:
        for stream, source in zip(streams, sources, strict=True):
            detok.push(stream, source[at : at + size])
        at += size
        last = at >= FRAMES
        for mine, audio in zip(got, detok.decode(streams, [last] * 3), strict=True):
            mine.append(audio)
    assert {length for _, _, length in graphs.shapes} >= {14, 30}
    assert {rows for _, rows, _ in graphs.shapes} <= set(dac_module.GRAPH_ROWS)
    for mine, source in zip(got, sources, strict=True):
        whole = detok.decode_frames(source)
        np.testing.assert_allclose(
            np.concatenate(mine), whole, rtol=0, atol=ROUNDING * np.abs(whole).max()
        )


@pytest.mark.parametrize("pushes", [[14, 16, 7], [14, 23], [37]])
def test_a_streams_last_window_replays_at_a_captured_length(dac, frames, pushes):
    """A stream's last window ends at its last frame, a length of its own (37 frames: its
    last pieces [20, 36) and [36, 37) make windows of 27 and 11): it starts further back, at a
    captured length, and replays like the others, its audio the whole decode's. A stream
    shorter than every captured window decodes eagerly."""
    graphs = EagerGraphs(deferred=True)
    detok = DacDetokenizer(dac)
    detok.enable_cuda_graphs(graphs)
    calls: list[int] = []  # every decode, replayed (graphs.shapes) or eager
    decode_codes = detok.decode_codes
    detok.decode_codes = lambda codes: calls.append(codes.shape[-1]) or decode_codes(codes)

    for source, replays in (
        (frames[:37], True),
        (frames[: min(detok.window_lengths()) - 1], False),
    ):
        graphs.shapes.clear()
        calls.clear()
        got = _streamed(detok, source, pushes if replays else [len(source)])
        assert len(graphs.shapes) == (len(calls) if replays else 0)
        whole = detok.decode_frames(source)  # one window of its own length: eager
        np.testing.assert_allclose(got, whole, rtol=0, atol=ROUNDING * np.abs(whole).max())
