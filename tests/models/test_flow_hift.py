"""The flow + HiFT detokenizer: streamed in chunks against decoded whole, batch against singles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

from engine.host_ops import REPLAY, HostOpCounter
from models.codecs.flow_hift.audible_weights import make_audible
from models.codecs.flow_hift.encoder import chunk_ids, chunk_mask
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator, istft
from models.codecs.flow_hift.hift_stream import HiftStreamer
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import TINY_SIZES, cosyvoice2_yaml
from tests.cpu_graphs import DeferredCountedGraphs, EagerGraphs
from tests.models.hift_seams import assert_within_seams


@pytest.fixture(scope="module")
def detok(tmp_path_factory) -> FlowHiftDetokenizer:
    folder: Path = tmp_path_factory.mktemp("flow_hift")
    (folder / "cosyvoice2.yaml").write_text(cosyvoice2_yaml(TINY_SIZES))
    cfg = parse_config(read_yaml(folder / "cosyvoice2.yaml"))
    torch.manual_seed(5)
    flow, hift = CausalFlow(cfg.flow).eval(), make_audible(HiFTGenerator(cfg.hift)).eval()
    hift.fold_weight_norm()
    return FlowHiftDetokenizer(flow, hift, cfg.chunk_size)


@pytest.fixture(scope="module")
def unbounded(detok) -> FlowHiftDetokenizer:
    """The same weights with CosyVoice's unbounded history: every chunk re-runs it all."""
    return FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, context_chunks=None)


def stream_for(detok, seed: int, prompt_chunks: int):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 6561, (25 * prompt_chunks,), generator=g).tolist()
    return detok.new_stream(
        tokens, torch.randn(50 * prompt_chunks, 80, generator=g), torch.randn(192, generator=g)
    )


def codes(seed: int, n: int) -> list[int]:
    return torch.randint(0, 6561, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def streamed(detok, state, tokens, pushes) -> np.ndarray:
    out, i = [], 0
    for size in pushes:
        detok.push(state, tokens[i : i + size])
        i += size
        out += detok.decode([state], [False])
    detok.push(state, tokens[i:])
    out += detok.decode([state], [True])
    return np.concatenate(out)


def whole(detok, state, tokens) -> np.ndarray:
    detok.push(state, tokens)
    return detok.decode([state], [True])[0]


def test_chunked_equals_whole_within_hift_seam_tolerance(detok):
    tokens = codes(1, 90)
    chunked = streamed(detok, stream_for(detok, 2, 1), tokens, [10, 20, 25, 13])
    ref = whole(detok, stream_for(detok, 2, 1), tokens)
    assert len(chunked) == len(ref) == 90 * 2 * 480
    # The flow's mel is exact: a whole decode makes the same per-chunk window rows as the
    # stream (bounded history: prompt + 2 context chunks), and within a row attention is
    # chunk-causal, convs causal, noise frame-indexed, and the 3-token look-ahead is present
    # before a chunk is decoded. (How the bounded window departs from CosyVoice's unbounded
    # history is the window tests' subject below.) HiFT's seams: tests/models/hift_seams.py.
    assert_within_seams(chunked, ref)


def test_with_context_over_hifts_reach_the_stream_is_the_whole_decode(detok):
    """HiFT's receptive field reaches 12 mel frames each side: with 12 frames of context the
    windows, their placement and the sine phase carried between them make exactly the whole
    decode, and one frame less on either side does not."""

    def stream_error(left: int, right: int) -> float:
        detokenizer = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, left, right)
        chunked = streamed(detokenizer, stream_for(detokenizer, 4, 1), tokens, pushes)
        ref = whole(detokenizer, stream_for(detokenizer, 4, 1), tokens)
        assert len(chunked) == len(ref) == 90 * 2 * 480
        return float(np.abs(chunked - ref).max() / np.sqrt(np.mean(ref**2)))

    tokens, pushes = codes(3, 90), [10, 20, 25, 13]
    assert stream_error(12, 12) < 1e-4  # fp32 rounding
    # One frame short on either side leaves seams (measured 6e-4 and 1e-3 of the RMS), and the
    # served 8 each side leave larger ones (tests/models/hift_seams.py bounds them).
    assert stream_error(11, 12) > 3e-4
    assert stream_error(12, 11) > 3e-4
    assert stream_error(8, 8) > 1e-2


def test_flow_mel_chunked_equals_whole(detok):
    tokens = codes(3, 80)
    a, b = stream_for(detok, 4, 1), stream_for(detok, 4, 1)
    detok.push(a, tokens[:60])
    detok._flow_step([a], [False])  # 2 chunks (57 tokens + 3 look-ahead)
    assert a.tokens_decoded == 50
    detok.push(a, tokens[60:])
    detok._flow_step([a], [True])
    detok.push(b, tokens)
    detok._flow_step([b], [True])
    torch.testing.assert_close(a.mel, b.mel, atol=1e-4, rtol=1e-4)


def streamed_alone(detok, setups) -> list[np.ndarray]:
    """Each request of `setups` (seed, prompt chunks, tokens, pushes) streamed alone."""
    return [
        streamed(detok, stream_for(detok, s, p), codes(s, n), pushes) for s, p, n, pushes in setups
    ]


def assert_batch_equals_singles(detok, setups, singles=None) -> None:
    """setups: (seed, prompt chunks, tokens, pushes) per request. The requests streamed
    together (every push round in one decode call, then the rest final) give each the audio it
    gets streamed alone with the same pushes (`singles`, when the caller has streamed them)."""
    if singles is None:
        singles = streamed_alone(detok, setups)
    states = [stream_for(detok, s, p) for s, p, _, _ in setups]
    tokens = [codes(s, n) for s, _, n, _ in setups]
    out = [[] for _ in setups]
    for step in range(max(len(pushes) for *_, pushes in setups)):
        for st, toks, (_, _, _, pushes) in zip(states, tokens, setups, strict=True):
            if step < len(pushes):
                detok.push(st, toks[sum(pushes[:step]) : sum(pushes[: step + 1])])
        for k, pcm in enumerate(detok.decode(states, [False] * len(setups))):
            out[k].append(pcm)
    for st, toks, (_, _, _, pushes) in zip(states, tokens, setups, strict=True):
        detok.push(st, toks[sum(pushes) :])
    for k, pcm in enumerate(detok.decode(states, [True] * len(setups))):
        out[k].append(pcm)
    for single, parts in zip(singles, out, strict=True):
        np.testing.assert_allclose(np.concatenate(parts), single, atol=1e-5)


def test_batch_of_n_equals_n_singles(detok):
    assert_batch_equals_singles(
        detok, [(11, 1, 70, [30, 30]), (12, 2, 55, [28, 10]), (13, 1, 40, [40])]
    )


def chunk_mels(detok, state, tokens) -> torch.Tensor:
    """The mel of streaming `tokens` one chunk (+ look-ahead) per call, then the rest final."""
    for i in range(0, len(tokens), detok.chunk):
        detok.push(state, tokens[i : i + detok.chunk])
        detok._flow_step([state], [False])
    detok._flow_step([state], [True])
    return state.mel


def test_bounded_window_equals_unbounded_history_until_it_is_full(detok, unbounded):
    # 5 chunks + 10 tokens; a window holds the prompt and 2 chunks of context, so chunks 0-2
    # see the whole history and equal CosyVoice's unbounded streaming mel.
    tokens = codes(21, 135)
    ours = chunk_mels(detok, stream_for(detok, 22, 1), tokens)
    ref = chunk_mels(unbounded, stream_for(unbounded, 22, 1), tokens)
    assert ours.shape == ref.shape == (80, 270)
    exact = 2 * 3 * detok.chunk
    torch.testing.assert_close(ours[:, :exact], ref[:, :exact], atol=1e-4, rtol=1e-4)


def test_chunk_mel_does_not_depend_on_history_before_its_window(detok, unbounded):
    # Chunk 3's window is chunks 1-3: changing chunk 0 leaves its mel as it was (the noise of
    # its frames is still indexed by their place in the utterance), where CosyVoice's
    # unbounded history changes it.
    tokens = codes(23, 100)
    other = codes(24, 25) + tokens[25:]
    frames = slice(2 * 3 * detok.chunk, 2 * 4 * detok.chunk)
    a = chunk_mels(detok, stream_for(detok, 25, 1), tokens)[:, frames]
    b = chunk_mels(detok, stream_for(detok, 25, 1), other)[:, frames]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    c = chunk_mels(unbounded, stream_for(unbounded, 25, 1), tokens)[:, frames]
    d = chunk_mels(unbounded, stream_for(unbounded, 25, 1), other)[:, frames]
    assert (c - d).abs().max() > 1e-3


def test_graph_buckets_pad_rows_and_frames_without_changing_the_mel(detok):
    # Three requests (prompts of 1 and 2 chunks) decoded through the graph buckets (rows
    # padded to 4, frames to whole chunks) equal the unpadded eager solve.
    graphed = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk)
    graphs = EagerGraphs(deferred=True)
    graphed.enable_cuda_graphs(graphs)
    setups = [(31, 1, 70), (32, 2, 64), (33, 1, 37)]
    for final in (False, True):
        eager = [stream_for(detok, s, p) for s, p, _ in setups]
        padded = [stream_for(graphed, s, p) for s, p, _ in setups]
        for a, b, (s, _, n) in zip(eager, padded, setups, strict=True):
            detok.push(a, codes(s, n))
            graphed.push(b, codes(s, n))
        detok._flow_step(eager, [final] * 3)
        graphed._flow_step(padded, [final] * 3)
        for a, b in zip(eager, padded, strict=True):
            torch.testing.assert_close(a.mel, b.mel, atol=1e-5, rtol=1e-5)
    # Streamed: 5 chunk rows, the longest window 200 frames; final: 8 rows, 228 frames → 250.
    # Each flow call: the "prep" graph, then one Euler step's graph per step, paced after each.
    steps = detok.flow.cfg.n_timesteps
    assert graphs.shapes == [
        ("prep", 8, 200),
        *[("euler", 8, 200)] * steps,
        ("prep", 8, 250),
        *[("euler", 8, 250)] * steps,
    ]
    assert graphs.paces == 2 * steps


def test_a_long_voice_prompt_replays_graphs_once_covered(detok):
    """A voice prompt longer than GRAPH_PROMPT_CHUNKS (a clip of 4 s or more): without
    cover_prompt (what CosyVoice2Model.add_voice calls) its flow jobs find no captured bucket
    and run eagerly; covered, every flow call replays, with the eager detokenizer's audio,
    and the lane's twin covers it too. Past MAX_GRAPH_PROMPT_CHUNKS it is refused."""
    long = detok.GRAPH_PROMPT_CHUNKS + 3  # its first window already tops the default buckets
    tokens = codes(61, detok.chunk + detok.lookahead + 6)
    pushes = [detok.chunk + detok.lookahead]
    want = streamed(detok, stream_for(detok, 61, long), tokens, pushes)

    def graphed_audio(cover: bool) -> tuple[np.ndarray, int]:
        # One row bucket, the one these single streams replay: fewer buckets to capture.
        graphed = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, graph_rows=(1,))
        if cover:
            assert graphed.cover_prompt(long)
            assert graphed.twin((1,)).long_prompts == {long}
        graphed.enable_cuda_graphs(EagerGraphs(deferred=True))
        audio = streamed(graphed, stream_for(graphed, 61, long), tokens, pushes)
        return audio, sum(n for (stage, *_), n in graphed.eager_calls.items() if stage == "flow")

    uncovered, eager_flow_calls = graphed_audio(False)
    assert eager_flow_calls > 0
    covered, eager_flow_calls = graphed_audio(True)
    assert eager_flow_calls == 0
    np.testing.assert_allclose(covered, want, atol=1e-4)
    np.testing.assert_allclose(uncovered, want, atol=1e-4)
    assert not detok.cover_prompt(detok.MAX_GRAPH_PROMPT_CHUNKS + 1)


def test_window_rows_start_from_the_noise_of_their_place_in_the_utterance(detok):
    # A row of a 1-chunk prompt and generated tokens [50, 128): prompt frames start from noise
    # frames 0-49, generated ones from frames 50 + 2*50 on, as in the whole utterance.
    flow, g = detok.flow, torch.Generator().manual_seed(41)
    tokens = torch.randint(0, 6561, (1, 25 + 78), generator=g)
    z, *_ = flow.condition(
        tokens,
        torch.tensor([103]),
        torch.tensor([100]),
        torch.randn(1, 50, 80, generator=g),
        torch.tensor([50]),
        torch.randn(1, 192, generator=g),
        skipped=torch.tensor([50]),
    )
    assert z.shape == (1, 80, 200)
    torch.testing.assert_close(z[0, :, :50], flow.noise[0, :, :50])
    torch.testing.assert_close(z[0, :, 50:], flow.noise[0, :, 150:300])


# --- a short first chunk (first_hop < chunk) -------------------------------------------------


@pytest.fixture(scope="module", params=[7, 16])
def short_first(request, detok) -> FlowHiftDetokenizer:
    """The same weights with a first audio chunk of `first_hop` tokens."""
    return FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, first_hop=request.param)


@pytest.fixture(scope="module")
def captured_short_first(short_first) -> tuple[FlowHiftDetokenizer, EagerGraphs]:
    """short_first's weights and first hop with graphs captured, once for the module: every
    bucket's key, each traced when a test first replays it (EagerGraphs(deferred=True)). The
    graph tests below share it, as the engine's jobs share one capture."""
    d = short_first
    graphed = FlowHiftDetokenizer(d.flow, d.hift, d.chunk, first_hop=d.first_hop)
    graphs = EagerGraphs(deferred=True)
    graphed.enable_cuda_graphs(graphs)
    return graphed, graphs


@pytest.fixture
def graphed_short_first(captured_short_first) -> tuple[FlowHiftDetokenizer, EagerGraphs]:
    """captured_short_first as a test finds it fresh: no key run, no eager call counted yet
    (what earlier tests ran is cleared)."""
    graphed, graphs = captured_short_first
    graphs.shapes.clear()
    graphs.paces = 0
    graphed.eager_calls.clear()
    return graphed, graphs


def test_chunk_ids_give_a_short_first_chunk_its_own_chunk():
    # Prompt of 2 chunks (4 tokens each here), first generated chunk of 3, then chunks of 4.
    ids = chunk_ids(16, 4, "cpu", first_end=torch.tensor([11]), short_by=1)
    assert ids.tolist() == [[0] * 4 + [1] * 4 + [2] * 3 + [3] * 4 + [4]]
    mask = chunk_mask(torch.ones(1, 16, dtype=torch.bool), ids)[0]
    assert mask[8, 10] and not mask[8, 11] and mask[11, 14] and not mask[10, 11]
    every = torch.ones(1, 16, dtype=torch.bool)
    assert torch.equal(chunk_mask(every, chunk_ids(16, 4, "cpu")), chunk_mask(every, 4))


def test_short_first_chunk_streamed_equals_whole(short_first):
    d, hop = short_first, short_first.first_hop
    tokens = codes(51, 90)
    # The first push is the first chunk and its look-ahead exactly, as the engine hands it.
    chunked = streamed(d, stream_for(d, 52, 1), tokens, [hop + 3, 25, 20, 9])
    ref = whole(d, stream_for(d, 52, 1), tokens)
    assert len(chunked) == len(ref) == 90 * 2 * 480
    assert_within_seams(chunked, ref)


def test_short_first_chunk_mel_is_exact_and_final_after_its_look_ahead(short_first):
    d, hop = short_first, short_first.first_hop
    tokens = codes(53, 80)
    a, b = stream_for(d, 54, 2), stream_for(d, 54, 2)
    d.push(a, tokens[: hop + 2])
    d._flow_step([a], [False])
    assert a.tokens_decoded == 0  # the look-ahead is not all there yet
    d.push(a, tokens[hop + 2 : hop + 3])
    d._flow_step([a], [False])
    assert a.tokens_decoded == hop and a.mel.shape[1] == 2 * hop
    d.push(a, tokens[hop + 3 : hop + 27])
    d._flow_step([a], [False])
    assert a.tokens_decoded == hop  # the second chunk is 25 tokens after the first
    d.push(a, tokens[hop + 27 :])
    d._flow_step([a], [True])
    d.push(b, tokens)
    d._flow_step([b], [True])
    torch.testing.assert_close(a.mel, b.mel, atol=1e-4, rtol=1e-4)


def test_short_first_chunk_bounded_window_equals_unbounded_until_full(short_first):
    # CosyVoice's unbounded history decodes the utterance as one row, chunk-masked on the same
    # grid (first hop, then whole chunks): its mel of the first hop and the two chunks after
    # it equals the bounded rows'. This is what pins the grid: a first chunk attending to the
    # rest of a whole 25-token chunk would differ here.
    d = short_first
    unbounded = FlowHiftDetokenizer(
        d.flow, d.hift, d.chunk, context_chunks=None, first_hop=d.first_hop
    )
    tokens = codes(55, 120)
    ours, ref = stream_for(d, 56, 1), stream_for(unbounded, 56, 1)
    for state, det in ((ours, d), (ref, unbounded)):
        det.push(state, tokens)
        det._flow_step([state], [True])
    exact = 2 * (d.first_hop + 2 * d.chunk)
    torch.testing.assert_close(ours.mel[:, :exact], ref.mel[:, :exact], atol=1e-4, rtol=1e-4)
    assert (ours.mel[:, exact:] - ref.mel[:, exact:]).abs().max() > 1e-4  # bounded after


def test_short_first_chunk_batch_of_n_equals_n_singles(short_first):
    # In one call a request makes its first chunk, another a steady chunk, a third both.
    d, hop = short_first, short_first.first_hop
    setups = [(61, 1, 70, [hop + 3, 28]), (62, 2, 60, [hop + 30, 10]), (63, 1, 45, [hop + 1, 30])]
    assert_batch_equals_singles(d, setups)


def test_short_first_chunk_has_its_own_graph_bucket(short_first, graphed_short_first):
    d, hop = short_first, short_first.first_hop
    graphed, graphs = graphed_short_first
    assert ("prep", 8, 2 * (25 + hop)) in graphs and ("prep", 16, 2 * (25 + hop)) not in graphs
    assert ("euler", 8, 2 * (25 + hop)) in graphs
    eager = [stream_for(d, s, 1) for s in (71, 72)]
    padded = [stream_for(graphed, s, 1) for s in (71, 72)]
    for a, b, s in zip(eager, padded, (71, 72), strict=True):
        d.push(a, codes(s, hop + 3))
        graphed.push(b, codes(s, hop + 3))
    d._flow_step(eager, [False] * 2)
    graphed._flow_step(padded, [False] * 2)
    # The first chunks' rows, unpadded: the prep graph and the steps'.
    assert set(graphs.shapes) == {("prep", 2, 2 * (25 + hop)), ("euler", 2, 2 * (25 + hop))}
    for a, b in zip(eager, padded, strict=True):
        torch.testing.assert_close(a.mel, b.mel, atol=1e-5, rtol=1e-5)


def test_first_hop_out_of_range_is_refused_clearly(detok):
    for bad in (4, 26):
        with pytest.raises(ValueError, match=r"first_hop_tokens must be in \[5, 25\]"):
            FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, first_hop=bad)


# --- host cost: graph buckets for the whole job, no host syncs, few host ops -----------------


def test_istft_equals_torchs():
    window = torch.hann_window(16, periodic=True)
    g = torch.Generator().manual_seed(81)
    spec = torch.polar(torch.rand(2, 9, 50, generator=g).exp(), torch.randn(2, 9, 50, generator=g))
    ref = torch.istft(spec, 16, 4, 16, window=window)
    torch.testing.assert_close(istft(spec, 4, window), ref, atol=1e-6, rtol=1e-5)


def test_graph_functions_make_no_host_syncs(detok):
    # A device read (.item(), torch.equal, a data-dependent shape) fails a CUDA graph capture
    # and stalls an eager job. Fake tensors have no data: such a read raises here.
    # (torch.istft checks its window on the host, hence hift.istft.)
    m = detok.flow.cfg.output_size
    with FakeTensorMode(allow_non_fake_inputs=True):
        mel = detok.flow_rows(
            torch.zeros(2, 50 + 3 + 5, dtype=torch.long),  # 50 tokens, look-ahead, 5 ints
            torch.zeros(2, 100, m),
            torch.zeros(2, detok.flow.cfg.spk_embed_dim),
        )
        assert mel.shape == (2, m, 100)
        wav, phase = detok.vocoder.vocode_windows(
            torch.zeros(2, m, 66),
            torch.zeros(2, detok.vocoder.n_harmonics, dtype=torch.float64),
            torch.zeros(2, 3, dtype=torch.long),
        )
        assert wav.shape == (2, 66 * 480) and phase.shape == (2, detok.vocoder.n_harmonics)
        with pytest.raises(DataDependentOutputException):
            window = torch.hann_window(16)
            torch.istft(torch.zeros(1, 9, 5, dtype=torch.complex64), 16, 4, 16, window=window)


def test_graphed_job_streams_the_same_audio_as_eager(short_first, graphed_short_first):
    # Flow rows padded to graph buckets (3 → 4 rows, tokens and frames to whole chunks) and
    # HiFT windows padded to 4 rows leave every request's audio as eager decoding makes it.
    d, hop = short_first, short_first.first_hop
    graphed, graphs = graphed_short_first
    setups = [
        (91, 1, 70, [hop + 3, 25, 25]),
        (92, 0, 60, [hop + 3, 25, 10]),
        (93, 1, 45, [hop + 3, 25, 5]),
    ]
    ours = streamed_alone(graphed, setups)
    assert ("hift", 1, 2 * d.chunk + 16) in graphs.shapes  # steady, left + chunk + right
    assert_batch_equals_singles(graphed, setups, ours)  # graphed batch of 3 == graphed singles
    eager = streamed_alone(d, setups)
    for a, b in zip(eager, ours, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)
    assert ("hift", 4, 2 * hop) in graphs.shapes and ("prep", 4, 2 * (25 + hop)) in graphs.shapes


def test_last_and_part_chunk_windows_widen_to_a_captured_width(short_first, graphed_short_first):
    # An utterance's last window and a part-chunk flush are shorter than a steady window:
    # they take more left context (frames kept for it) up to a standard width, so they replay
    # a captured graph instead of running eagerly, and their audio still matches a
    # whole-utterance decode as closely as steady windows do.
    d, hop = short_first, short_first.first_hop
    graphed, graphs = graphed_short_first
    widths = graphed.hift_frames()
    pushes = [hop + 3, 25, 11]  # the third push flushes part of a chunk (a final job)
    tokens = codes(95, hop + 3 + 25 + 11 + 9)
    ours = streamed(graphed, stream_for(graphed, 95, 1), tokens, pushes)
    used = [w for stage, _, w in graphs.shapes if stage == "hift"]
    assert used and set(used) <= set(widths)
    assert len(set(used)) > 1  # not only steady windows: the last one widened
    assert not graphed.eager_calls
    ref = whole(d, stream_for(d, 95, 1), tokens)
    assert_within_seams(ours, ref)
    # Without standard widths (GLM-4-Voice's streamer) windows keep `left` frames of context.
    plain = HiftStreamer(d.hift, d.left, d.right)
    assert plain.widths == () and graphed.vocoder.widths == widths


def test_graphed_steady_job_dispatches_a_few_host_ops_per_row(detok):
    # One steady job (every request's next chunk): eager, the flow's encoder and 20 estimator
    # passes and HiFT are thousands of ops (kernel launches on a GPU); graphed, a dozen replays
    # and the packing of inputs and unpacking of outputs. No job reads the device (.item()).
    counter = HostOpCounter()
    graphed = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk)
    graphed.enable_cuda_graphs(DeferredCountedGraphs(counter))
    totals = {}
    for name, d in (("eager", detok), ("graphed", graphed)):
        for rows in (1, 3):
            states = [stream_for(d, 100 + i, 1) for i in range(rows)]
            for size in (28, 25):
                for s in states:
                    d.push(s, codes(size, size))
                d.decode(states, [False] * rows)
            for s in states:
                d.push(s, codes(7, 25))
            counter.counts.clear()
            with counter:
                d.decode(states, [False] * rows)
            assert counter.device_reads == 0
            # Graphed: the flow's prep, its Euler step once per step, HiFT.
            replays = 1 + d.flow.cfg.n_timesteps + 1
            assert counter.counts[REPLAY] == (replays if name == "graphed" else 0)
            totals[name, rows] = counter.total
    assert totals["graphed", 1] * 30 < totals["eager", 1]
    assert totals["graphed", 3] - totals["graphed", 1] <= 2 * 10  # ~6 ops per row


def test_the_estimators_blocks_compile_once_per_kind_and_equal_eager(detok):
    """--compile-codec's regional compile (engine.cuda_graphs.compile_regions) of the flow
    estimator's repeated blocks: each block compiles whole (`fullgraph`: a graph break, such
    as a host read in a block, fails here); blocks of one kind and shape share one program,
    so the compile time does not grow with the estimator's depth; another bucket of rows
    reuses them (dynamic shapes); and the Euler step equals eager."""
    import copy

    from torch._dynamo.utils import counters

    from engine.cuda_graphs import compile_regions

    detok_steps = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk)
    states = [stream_for(detok_steps, seed, 1) for seed in (41, 42)]
    for seed, state, n in zip((41, 42), states, (40, 64), strict=True):
        detok_steps.push(state, codes(seed, n))
    rows = [w for s in states for w in detok_steps._windows(s, False)]
    seqs, _, out_lengths = detok_steps.row_tokens(rows)
    frames = detok_steps.ratio * max(out_lengths)
    width = max(len(q) for q in seqs)
    compiled = copy.deepcopy(detok.flow)  # compiling is in place; the fixture stays eager
    blocks = compiled.decoder.estimator.repeated_blocks()
    kinds = {(type(b), tuple(p.shape for p in b.parameters())) for b in blocks}
    assert len(blocks) > len(kinds)  # blocks repeat: what the sharing is about
    torch._dynamo.reset()
    counters.clear()
    compile_regions(blocks)
    with torch.inference_mode():
        inputs = detok_steps._flow_inputs(rows, seqs, out_lengths, len(rows), frames, width)
        x, *fixed = detok_steps.prep_rows(*inputs)
        t, dt = detok_steps._euler_steps()[4]
        b = len(rows)
        for n in (b, 1):  # two buckets of rows: the second reuses the programs
            # The doubled inputs hold the conditional rows, then the unconditional ones.
            part = [x[:n], *(torch.cat([f[:n], f[b : b + n]]) for f in fixed)]
            got = compiled.euler_step(*part, t, dt)
            want = detok.flow.euler_step(*part, t, dt)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            assert 0 < counters["stats"]["unique_graphs"] <= len(kinds)
