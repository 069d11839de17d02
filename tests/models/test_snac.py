"""SNAC codec: published-layout loading/saving and streamed-equals-whole decoding (CPU, tiny)."""

import copy
import json

import numpy as np
import pytest
import torch
from huggingface_hub.errors import LocalEntryNotFoundError
from snac import SNAC

from models.checkpoint_errors import CheckpointError
from models.codecs import snac_checkpoint
from models.codecs.snac import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    SnacDetokenizer,
    install_positional_noise,
    load_snac,
    positional_normal,
    save_snac,
    tiny_snac_config,
)
from tests.cpu_graphs import EagerGraphs

SPF = 2048  # samples per frame at 24 kHz


def _tiny(seed: int = 0) -> SNAC:
    torch.manual_seed(seed)
    return SNAC(**tiny_snac_config()).eval()


@pytest.fixture(scope="module")
def model() -> SNAC:
    model = _tiny()
    install_positional_noise(model)
    return model


def _frames(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4096, size=(n, 7))


def _whole(model: SNAC, frames: np.ndarray, seed: int = 0) -> np.ndarray:
    """Reference: one SNAC.decode over the whole utterance (noise seeded like the stream)."""
    codes = torch.from_numpy(frames)[None]
    levels = [codes[:, :, 0], codes[:, :, 1:3].reshape(1, -1), codes[:, :, 3:7].reshape(1, -1)]
    ctx = install_positional_noise(model)
    ctx.seed = torch.tensor([seed])
    try:
        with torch.inference_mode():
            return model.decode(levels)[0, 0].numpy()
    finally:
        ctx.seed = None


def _stream_all(
    det: SnacDetokenizer, utterances: list[np.ndarray], seeds: list[int], calls=None
) -> list[np.ndarray]:
    """Push each utterance a few frames at a time (1-3, set by its seed) and decode all live
    streams together each round, flushing each one with final=True after its last frame.
    `calls`, a list, gets the samples each stream got in each round (None once it ended)."""
    streams = [det.new_stream(seed=seed) for seed in seeds]
    pushed = [0] * len(utterances)
    audio: list[list[np.ndarray]] = [[] for _ in utterances]
    while not all(s.finished for s in streams):
        live = [i for i, s in enumerate(streams) if not s.finished]
        for i in live:
            step = 1 + streams[i].seed % 3
            det.push(streams[i], utterances[i][pushed[i] : pushed[i] + step].tolist())
            pushed[i] = min(len(utterances[i]), pushed[i] + step)
        final = [pushed[i] == len(utterances[i]) for i in live]
        for i, chunk in zip(live, det.decode([streams[i] for i in live], final), strict=True):
            assert chunk.dtype == np.float32
            audio[i].append(chunk)
        if calls is not None:
            calls.append([len(audio[i][-1]) if i in live else None for i in range(len(streams))])
    return [np.concatenate(a) for a in audio]


def _assert_streamed_is_whole(det, model, utterances: list[np.ndarray], tolerance: float):
    """Stream the utterances together (_stream_all): each one's audio has its full length and
    is within `tolerance` (max error over RMS) of its whole decode."""
    streamed_all = _stream_all(det, utterances, seeds=list(range(len(utterances))))
    for i, (streamed, frames) in enumerate(zip(streamed_all, utterances, strict=True)):
        assert len(streamed) == len(frames) * SPF
        assert _relative_error(streamed, _whole(model, frames, seed=i)) < tolerance


# Loading and saving ---------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    original = _tiny()
    folder = save_snac(original, tmp_path / "snac")
    assert json.loads((folder / CONFIG_FILE).read_text()) == tiny_snac_config()
    loaded = load_snac(str(folder))
    for name, tensor in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    install_positional_noise(original)
    frames = _frames(6, seed=1)
    np.testing.assert_array_equal(_whole(loaded, frames), _whole(original, frames))


def test_loads_old_style_weight_norm_names(tmp_path):
    """Checkpoints from torch.nn.utils.weight_norm call the tensors weight_g / weight_v."""
    original = _tiny()
    folder = save_snac(original, tmp_path / "snac")
    state = torch.load(folder / WEIGHTS_FILE, weights_only=True)
    old = {
        k.replace("parametrizations.weight.original0", "weight_g").replace(
            "parametrizations.weight.original1", "weight_v"
        ): v
        for k, v in state.items()
    }
    assert any(k.endswith(".weight_g") for k in old)
    torch.save(old, folder / WEIGHTS_FILE)
    loaded = load_snac(str(folder))
    for name, tensor in original.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_missing_files_say_what_is_needed(tmp_path):
    folder = save_snac(_tiny(), tmp_path / "snac")
    (folder / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_snac(str(folder))
    save_snac(_tiny(), folder)
    (folder / WEIGHTS_FILE).unlink()
    with pytest.raises(CheckpointError, match="pytorch_model.bin is missing"):
        load_snac(str(folder))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_snac(str(tmp_path / "nowhere"))


def test_missing_or_mismatched_tensor_is_named(tmp_path):
    folder = save_snac(_tiny(), tmp_path / "snac")
    state = torch.load(folder / WEIGHTS_FILE, weights_only=True)
    gone = "decoder.model.2.block.1.parametrizations.weight.original1"
    del state[gone]
    torch.save(state, folder / WEIGHTS_FILE)
    with pytest.raises(CheckpointError, match=f"missing: {gone}"):
        load_snac(str(folder))
    save_snac(_tiny(), folder)
    config = {**tiny_snac_config(), "decoder_dim": 32}
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="shape: .*config wants"):
        load_snac(str(folder))


def test_hub_failure_explains_offline_use(monkeypatch):
    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("no network")

    monkeypatch.setattr(snac_checkpoint, "snapshot_download", offline)
    with pytest.raises(CheckpointError, match="hf download hubertsiuzdak/snac_24khz"):
        load_snac("hubertsiuzdak/snac_24khz")


# Noise ----------------------------------------------------------------------------------------


def test_positional_noise_is_standard_normal_and_position_addressed():
    z = positional_normal(torch.tensor([0, 5]), 1, torch.tensor([0, 10**9]), 20_000)
    assert z.mean(1).abs().max() < 0.03 and (z.std(1) - 1).abs().max() < 0.03  # ~4 sigma
    window = positional_normal(torch.tensor([0]), 1, torch.tensor([700]), 50)
    torch.testing.assert_close(window[0], z[0, 700:750], rtol=0, atol=0)
    other_salt = positional_normal(torch.tensor([0]), 2, torch.tensor([700]), 50)
    assert not torch.equal(window, other_salt)


def test_decoding_is_deterministic_and_seeded(model):
    frames = _frames(5, seed=2)
    np.testing.assert_array_equal(_whole(model, frames, seed=3), _whole(model, frames, seed=3))
    assert not np.array_equal(_whole(model, frames, seed=3), _whole(model, frames, seed=4))


# Streaming ------------------------------------------------------------------------------------


def test_frames_ready_ramps_chunks_and_waits_for_lookahead(model):
    det = SnacDetokenizer(model, lookahead_frames=2, chunk_frames=4)
    stream = det.new_stream()
    det.push(stream, _frames(2, seed=0).tolist())
    assert det.frames_ready(stream, final=False) == 0  # frame 0 still lacks 2 frames lookahead
    assert det.frames_ready(stream, final=True) == 2
    det.push(stream, _frames(1, seed=0).tolist())
    assert det.plan.first_audio_frames == 3 and det.frames_ready(stream, final=False) == 1
    # 16 frames: chunks 1, 1, 2 and a large one of 8, and as a stream's first job emits all
    # it has, the 2 frames left short of another chunk (+2 ahead)
    det.push(stream, _frames(13, seed=0).tolist())
    sizes = [end - start for start, end in det._chunks(stream, final=False)]
    assert sizes == [1, 1, 2, 8, 2] and det.frames_ready(stream, final=False) == 14
    (audio,) = det.decode([stream], [False])  # 14 frames' chunks, fed with their 2 ahead
    assert len(audio) == 16 * SPF - det.decoder.delay_samples
    assert det.frames_ready(stream, final=False) == 0 and det.frames_ready(stream, True) == 2
    assert stream.fed == stream.base == 16  # fed frames live on in the state, not kept
    det.push(stream, _frames(3, seed=0).tolist())  # past the first job: whole chunks only
    assert det.frames_ready(stream, final=False) == 0
    det.push(stream, _frames(1, seed=0).tolist())
    assert det.frames_ready(stream, final=False) == 4


def test_steady_chunks_grow_to_the_large_chunk_when_its_frames_are_in(model):
    det = SnacDetokenizer(model, chunk_frames=4, large_chunk_frames=8)
    stream = det.new_stream()
    det.push(stream, _frames(24, seed=1).tolist())
    sizes = [end - start for start, end in det._chunks(stream, final=False)]
    # 20 frames in large chunks, 4 left: too few for a large one; the first job's tail takes
    # the 2 short of their look-ahead
    assert sizes == [1, 1, 2, 8, 8, 2]
    det.decode([stream], [False])
    det.push(stream, _frames(4, seed=2).tolist())  # 6 in, with 2 of look-ahead: a 4-frame chunk
    assert [end - start for start, end in det._chunks(stream, final=False)] == [4]
    det.decode([stream], [False])
    det.push(stream, _frames(10, seed=3).tolist())  # 10 in: a large chunk and its look-ahead
    assert [end - start for start, end in det._chunks(stream, final=False)] == [8]
    with pytest.raises(ValueError, match="large_chunk_frames"):
        SnacDetokenizer(model, chunk_frames=4, large_chunk_frames=3)


@pytest.mark.parametrize("ramp", [1.0, 0.75])
def test_would_emit_says_whether_new_frames_give_audio(model, ramp):
    """would_emit(stream, k) is what pushing k frames and decoding then does, for every k and
    every point of a stream (its first chunks, steady 4-frame ones, the large one): one or two
    new frames past the ramp give no audio."""
    det = SnacDetokenizer(model, chunk_frames=4, large_chunk_frames=8, chunk_ramp=ramp)
    stream, rng = det.new_stream(), np.random.default_rng(5)
    checked = {True: 0, False: 0}
    for seed in range(14):
        for k in range(0, 7):
            trial = copy.deepcopy(stream)
            if k:
                det.push(trial, _frames(k, seed=seed).tolist())
            emitted = len(det.decode([trial], [False])[0]) > 0
            assert det.would_emit(stream, k) == emitted, (stream.emitted, stream.total, k)
            checked[emitted] += 1
        push = int(rng.integers(1, 6))
        det.push(stream, _frames(push, seed=seed).tolist())
        det.decode([stream], [False])
    assert checked[True] > 10 and checked[False] > 10  # both answers were exercised


def test_a_ramp_below_one_keeps_a_young_streams_chunks_under_its_audio_out(model):
    """Frames arriving one at a time, as a loaded engine makes them: with the default ramp a
    chunk may hold as much audio as is already out (1, 1, 2, 4, 4 …); at 0.75 the chunk after
    4 frames out holds 3, so it needs one frame fewer made while the listener plays its
    buffer, and the ramp reaches the steady 4 one chunk later."""

    def sizes(ramp: float) -> list[int]:
        det = SnacDetokenizer(model, chunk_frames=4, large_chunk_frames=8, chunk_ramp=ramp)
        stream, out = det.new_stream(), []
        for seed in range(24):
            det.push(stream, _frames(1, seed=seed).tolist())
            out += [end - start for start, end in det._chunks(stream, final=False)]
            det.decode([stream], [False])
        return out

    assert sizes(1.0) == [1, 1, 2, 4, 4, 4, 4]
    assert sizes(0.75) == [1, 1, 2, 3, 4, 4, 4]
    with pytest.raises(ValueError, match="chunk_ramp must be in"):
        SnacDetokenizer(model, chunk_ramp=0.0)
    with pytest.raises(ValueError, match="chunk_ramp must be in"):
        SnacDetokenizer(model, chunk_ramp=1.5)


@pytest.mark.parametrize("ramp", [1.0, 0.75])
def test_the_plan_counts_the_audio_a_stream_has_out(model, ramp):
    """SnacChunkPlan.samples_out, the arithmetic the simulator books a listener's audio by, is
    what the decoder returned so far: after every non-final decode (the first chunk's delay
    held back, each later chunk's audio in whole frames) and after the final flush."""
    det = SnacDetokenizer(model, chunk_ramp=ramp)
    spf, delay = det.samples_per_frame, det.decoder.delay_samples
    stream, rng, out = det.new_stream(), np.random.default_rng(3), 0
    for seed in range(12):
        det.push(stream, _frames(int(rng.integers(1, 5)), seed=seed).tolist())
        out += len(det.decode([stream], [False])[0])
        assert out == det.plan.samples_out(stream.emitted, stream.total, False, spf, delay)
    out += len(det.decode([stream], [True])[0])
    assert out == det.plan.samples_out(stream.emitted, stream.total, True, spf, delay)


def test_streamed_matches_whole_with_a_ramp_below_one(model):
    """The ramp moves where calls start, not what the decoder sees: still the whole decode."""
    utterances = [_frames(n, seed=n) for n in (19, 7)]
    det = SnacDetokenizer(model, chunk_ramp=0.75)
    _assert_streamed_is_whole(det, model, utterances, 1e-4)


def test_a_stream_in_a_hurry_emits_every_frame_past_its_lookahead(model):
    """Past its first job a stream emits whole chunks only; in a hurry (its listener about to
    run dry) the frames it has past the look-ahead come out at once, would_emit says so, and
    the audio still joins up with what follows into the whole decode."""
    det = SnacDetokenizer(model, lookahead_frames=2, chunk_frames=4)
    frames = _frames(16, seed=9)
    stream = det.new_stream(seed=0)
    det.push(stream, frames[:6].tolist())
    first = det.decode([stream], [False])[0]  # the first job: 4 frames out, 2 ahead
    assert stream.emitted == 4
    det.push(stream, frames[6:9].tolist())  # 3 new frames: short of a 4-frame chunk
    assert not det.would_emit(stream, 0) and det.would_emit(stream, 0, hurry=True)
    assert len(det.decode([copy.deepcopy(stream)], [False])[0]) == 0
    hurried = det.decode([stream], [False], hurry=[True])[0]
    assert stream.emitted == 7 and len(hurried) == 3 * SPF
    assert not det.would_emit(stream, 0, hurry=True)  # nothing past the look-ahead is left
    det.push(stream, frames[9:].tolist())
    rest = det.decode([stream], [True])[0]
    streamed = np.concatenate([first, hurried, rest])
    assert len(streamed) == len(frames) * SPF
    assert _relative_error(streamed, _whole(model, frames, seed=0)) < 1e-4


def test_push_rejects_bad_frames(model):
    det = SnacDetokenizer(model)
    stream = det.new_stream()
    with pytest.raises(ValueError, match="7 codes"):
        det.push(stream, [[1, 2, 3]])
    with pytest.raises(ValueError, match="audio-token offsets"):
        det.push(stream, [[0, 0, 0, 0, 0, 0, 4096]])
    det.decode([stream], [True])
    with pytest.raises(ValueError, match="after its final decode"):
        det.push(stream, [[0] * 7])


def test_rejects_codec_without_the_24khz_frame_layout():
    torch.manual_seed(0)
    other = SNAC(**{**tiny_snac_config(), "vq_strides": [2, 1]})
    with pytest.raises(ValueError, match=r"vq_strides \[4, 2, 1\]"):
        SnacDetokenizer(other)


def _relative_error(streamed: np.ndarray, whole: np.ndarray) -> float:
    return float(np.abs(streamed - whole).max() / np.sqrt(np.mean(whole**2)))


def test_batched_decode_equals_per_stream_decode(model):
    """Same pushes and decode calls per stream, once batched together and once alone: the
    calls feed the same frames, so only the batch dimension differs (float rounding at most)."""
    utterances = [_frames(n, seed=n) for n in (11, 6, 8)]
    det = SnacDetokenizer(model, chunk_frames=2)
    batched = _stream_all(det, utterances, seeds=[0, 1, 2])
    for i, frames in enumerate(utterances):
        (solo,) = _stream_all(det, [frames], seeds=[i])
        np.testing.assert_allclose(batched[i], solo, rtol=0, atol=1e-5)


def _assert_compiled_decodes_as_eager(units, decode) -> None:
    """`decode()` gives the same audio with `units` compiled (compile_regions, through
    Inductor on the CPU) as with them eager."""
    from torch._dynamo.utils import counters

    from engine.cuda_graphs import compile_regions, compiled_of, uncompile_regions

    torch._dynamo.reset()
    counters.clear()
    with torch.inference_mode():
        eager = decode()
        compile_regions(units)
        try:
            compiled = decode()
            assert compiled_of(units) == units
            assert counters["stats"]["unique_graphs"] >= 1  # Inductor ran, not eager
        finally:
            uncompile_regions(units)
    for e, c in zip(eager, compiled, strict=True):
        torch.testing.assert_close(c, e, rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(300)
def test_compiled_stateful_units_decode_as_the_eager_ones():
    """--compile-codec compiles the decoder's noise and residual-unit steps, snac's
    TorchScript Snake included (fullgraph, dynamic shapes: a graph break would be an error,
    and serving would fall back to eager kernels with a warning): two calls of different
    lengths and rows (2, then 3 with other ends and seeds), the second on the first's state,
    decode as the eager steps do. The
    output conv and the last block's upsampling, noise and last residual step (dilation 9:
    the longest state carried) stand for all twenty-two (each a program of its own, up to
    ~20 s of CPU to compile here: the other residual steps differ only in dilation)."""
    from models.codecs.snac_streaming import NO_END

    det = SnacDetokenizer(_tiny(seed=1))
    decoder = det.decoder
    blocks = decoder.repeated_blocks()
    last_upsample, last_noise = (
        list(steps.values())[-1] for steps in (decoder.upsample_steps, decoder.noise_steps)
    )
    output_conv = list(decoder.conv_steps.values())[-1]
    units = [blocks[-1], last_upsample, last_noise, output_conv]
    assert len(blocks) == 22  # 2 convs, 4 upsampling and 4 noise steps, 12 residual units
    assert output_conv.conv.out_channels == 1
    frames = torch.from_numpy(_frames(6, seed=4))[None].repeat(2, 1, 1)
    rows = lambda *values: torch.tensor(values, dtype=torch.int64)  # noqa: E731

    def two_calls():
        audio, state = decoder.decode_frames(
            frames[:, :3], decoder.new_state(2), rows(0, 0), rows(NO_END, NO_END), rows(1, 2)
        )
        # Three rows (batches of 1 would compile a second, size-specialised program).
        more, _ = decoder.decode_frames(
            frames[[0, 1, 0], 3:], state[[0, 1, 0]], rows(12, 12, 12), rows(24, NO_END, 30),
            rows(1, 2, 3),
        )  # fmt: skip
        return audio, more

    _assert_compiled_decodes_as_eager(units, two_calls)


def test_stateful_decoding_equals_the_whole_decode(model):
    """Each frame decoded once with the convs' state carried: every stream's audio is one
    whole decode's (float rounding: ~1e-6 of its RMS), streams of any length batched."""
    utterances = [_frames(n, seed=n) for n in (17, 9, 2, 26)]
    _assert_streamed_is_whole(SnacDetokenizer(model), model, utterances, 1e-4)
    # With no look-ahead frames held back, a stream can have every chunk out before its end
    # comes: the end's flush still brings its last samples out.
    det, frames = (
        SnacDetokenizer(model, lookahead_frames=0),
        _frames(8, seed=6),
    )  # chunks 1, 1, 2, 4
    stream = det.new_stream(seed=0)
    det.push(stream, frames.tolist())
    (before,) = det.decode([stream], [False])
    (after,) = det.decode([stream], [True])
    assert stream.emitted == 8 and len(after) == det.decoder.delay_samples
    assert _relative_error(np.concatenate([before, after]), _whole(model, frames, 0)) < 1e-4


def test_each_chunk_comes_out_short_of_the_decoders_delay(model):
    """A chunk comes out once its look-ahead frames are in: the stream's audio so far is then
    its chunks' less 661 samples (28 ms: the decoder's delay past the 2 frames of look-ahead),
    which come with the next chunk, and the end's call brings out the rest."""
    det = SnacDetokenizer(model)
    short = det.decoder.delay_samples - det.plan.lookahead_frames * SPF
    assert short == 661
    frames, stream, out = _frames(20, seed=3), det.new_stream(seed=0), 0
    for i in range(len(frames)):
        det.push(stream, frames[i : i + 1].tolist())
        due = det.frames_ready(stream, final=False)
        (audio,) = det.decode([stream], [False])
        assert (len(audio) > 0) == (due > 0)
        out += len(audio)
        assert out == (stream.emitted * SPF - short if stream.emitted else 0)
    (rest,) = det.decode([stream], [True])
    assert out + len(rest) == len(frames) * SPF


@pytest.fixture(scope="module")
def five_streams(model) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Five utterances fed alike (seed 3: a frame a round) and each one's audio streamed by a
    plain (eager) detokenizer: what the graphed detokenizers below must give. Arrays the tests
    only read."""
    utterances = [_frames(12, seed=s) for s in range(5)]
    plain = SnacDetokenizer(model, chunk_frames=2)
    return utterances, _stream_all(plain, utterances, seeds=[3] * 5)


def test_stateful_graph_jobs_pad_and_keep_each_rows_audio(model, five_streams):
    """The stateful calls replay captured graphs of the schedule's lengths (the first chunk
    with its look-ahead, then the chunks), padded with copies of the first row, whose state
    and audio change no stream's."""
    utterances, expected = five_streams
    graphed = SnacDetokenizer(model, chunk_frames=2)
    # Fewer sizes than served (each capture traces the call): 5 rows take the 5-row graphs,
    # not the 8-row ones, and 9 fit none.
    graphed.GRAPH_BATCHES = (5, 8)
    graphs = EagerGraphs()
    graphed.enable_cuda_graphs(graphs)
    assert {kind for kind, _, _ in graphs.keys} == {"snac"}
    assert {length for _, _, length in graphs.keys} == {3, 1, 2, 8}
    assert graphs.regions == graphed.decoder.repeated_blocks()  # compiled before capture
    # the latent's and the output's convs; a block's upsample, noise, 3 units
    assert len(graphs.regions) == 2 + 5 * len(model.decoder_rates)
    got = _stream_all(graphed, utterances, seeds=[3] * 5)
    assert graphs.shapes and {b for _, b, _ in graphs.shapes} == {5}
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-5)
    assert graphed._graph_bucket(4, 8) == 5 and graphed._graph_bucket(9, 8) is None


def _counted_graphs(model, batches: tuple[int, ...]):
    """A detokenizer whose graphs are captured at `batches` (EagerGraphs: what a replay runs),
    its graphs, and the list of the decoder calls it makes (their codes' shapes). Its captures
    are traced when their keys first run (deferred): these tests count which keys run, and
    test_stateful_graph_jobs_pad_and_keep_each_rows_audio traces every key it captures."""
    graphed = SnacDetokenizer(model, chunk_frames=2)
    graphed.GRAPH_BATCHES = batches
    graphs = EagerGraphs(deferred=True)
    graphed.enable_cuda_graphs(graphs)
    calls: list = []
    decode_frames = graphed.decoder.decode_frames
    graphed.decoder.decode_frames = lambda *a: calls.append(a[0].shape) or decode_frames(*a)
    graphs.shapes.clear()
    return graphed, graphs, calls


def test_a_lone_stream_replays_the_two_row_graph(model):
    """The served batch sizes start at 2: a stream decoded alone replays 2-row graphs (its row
    and a padding copy), so the compiled blocks never see a batch of 1, which would compile
    each of their programs a second time; its audio is still its own whole decode's."""
    assert SnacDetokenizer.GRAPH_BATCHES[0] == 2
    frames = _frames(12, seed=4)
    plain = SnacDetokenizer(model, chunk_frames=2)
    graphed, graphs, calls = _counted_graphs(model, SnacDetokenizer.GRAPH_BATCHES[:2])
    (expected,) = _stream_all(plain, [frames], seeds=[5])
    (got,) = _stream_all(graphed, [frames], seeds=[5])
    assert calls and {shape[0] for shape in calls} == {2}
    assert len(calls) == len(graphs.shapes)  # every call a replay
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_more_rows_than_the_largest_batch_go_in_its_calls(model, five_streams):
    """Five streams fed alike, with 2 rows the largest captured batch: each round's group goes
    in calls of 2, 2 and 1 rows, every one a replay, and each stream's audio is its own."""
    utterances, expected = five_streams
    graphed, graphs, calls = _counted_graphs(model, (1, 2))
    got = _stream_all(graphed, utterances, seeds=[3] * 5)
    assert len(calls) == len(graphs.shapes) and {b for _, b, _ in graphs.shapes} == {1, 2}
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-5)


def test_stateful_graph_jobs_never_run_eagerly(model):
    """A backlog of several chunks and a stream's final flush go in pieces of the captured
    lengths, a round each, so every call replays a graph (an eager call of an odd length would
    cost a served job tens of ms), and the audio is still the whole decode's."""
    graphed, graphs, calls = _counted_graphs(model, (1, 2, 4))
    utterances = [_frames(23, seed=1), _frames(11, seed=2)]
    streams = [graphed.new_stream(seed=s) for s in (1, 2)]
    # 7 frames at once: the first chunk and a backlog behind it; then the rest, and the end.
    for stream, frames in zip(streams, utterances, strict=True):
        graphed.push(stream, frames[:7].tolist())
    first = graphed.decode(streams, [False, False])
    for stream, frames in zip(streams, utterances, strict=True):
        graphed.push(stream, frames[7:].tolist())
    last = graphed.decode(streams, [True, True])
    assert len(calls) == len(graphs.shapes) > 2  # each call a replay of a captured key
    assert all(key in graphs for key in graphs.shapes)
    for row, frames in enumerate(utterances):
        audio = np.concatenate([first[row], last[row]])
        assert _relative_error(audio, _whole(model, frames, row + 1)) < 1e-4
