"""SNAC codec: published-layout loading/saving and exact streamed decoding (CPU, tiny)."""

import gc
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
    det: SnacDetokenizer, utterances: list[np.ndarray], seeds: list[int]
) -> list[np.ndarray]:
    """Push each utterance a few frames at a time (1-3, set by its seed) and decode all live
    streams together each round, flushing each one with final=True after its last frame."""
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
    return [np.concatenate(a) for a in audio]


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


def test_first_audio_after_three_frames_then_a_frame_each(model):
    det = SnacDetokenizer(model, max_streams=4)
    delay = det.delay_samples
    assert delay == 4757  # the decoder's symmetric convs: 2.32 frames (snac_24khz's layout)
    assert det.first_audio_frames == 3 and det.held_back_codes == 17
    stream = det.new_stream()
    det.push(stream, _frames(2, seed=0).tolist())
    assert [len(a) for a in det.decode([stream], [False])] == [0]
    det.push(stream, _frames(1, seed=1).tolist())
    assert [len(a) for a in det.decode([stream], [False])] == [3 * SPF - delay]
    det.push(stream, _frames(5, seed=2).tolist())
    assert [len(a) for a in det.decode([stream], [False])] == [5 * SPF]
    assert [len(a) for a in det.decode([stream], [True])] == [delay]  # the flush
    assert stream.emitted == 8 * SPF


def test_streamed_equals_whole(model):
    """Streams of different lengths pushed 1-3 frames at a time and decoded together each
    round equal one decode of each whole utterance: exact but for float32 summation order
    (measured ~1e-6 of the RMS; 1e-4 leaves room for other BLAS, while a lost, repeated or
    misplaced sample costs an error of the order of the RMS)."""
    utterances = [_frames(n, seed=n) for n in (17, 9, 2, 26, 1)]
    det = SnacDetokenizer(model, max_streams=8)
    streamed_all = _stream_all(det, utterances, seeds=list(range(len(utterances))))
    for i, (streamed, frames) in enumerate(zip(streamed_all, utterances, strict=True)):
        assert len(streamed) == len(frames) * SPF
        assert _relative_error(streamed, _whole(model, frames, seed=i)) < 1e-4


def test_batched_decode_equals_per_stream_decode(model):
    """Same pushes and decode calls per stream, once batched together and once alone: only
    the batch dimension differs (float rounding at most)."""
    utterances = [_frames(n, seed=n) for n in (11, 6, 8)]
    det = SnacDetokenizer(model, max_streams=8)
    batched = _stream_all(det, utterances, seeds=[0, 1, 2])
    for i, frames in enumerate(utterances):
        (solo,) = _stream_all(det, [frames], seeds=[i])
        np.testing.assert_allclose(batched[i], solo, rtol=0, atol=1e-5)


def test_slots_are_freed_at_the_end_or_when_a_stream_is_dropped(model):
    det = SnacDetokenizer(model, max_streams=2)
    first, second = det.new_stream(), det.new_stream()
    with pytest.raises(RuntimeError, match="max_streams"):
        det.new_stream()
    det.push(first, _frames(4, seed=0).tolist())
    det.decode([first], [True])
    third = det.new_stream()  # the finished stream's slot
    assert third.slot == first.slot
    del second
    gc.collect()
    det.new_stream()  # the dropped stream's slot


def test_a_reused_slot_starts_clean(model):
    """A stream dropped mid-utterance leaves its state in its slot; the next stream there
    decodes as if the slot were new."""
    det = SnacDetokenizer(model, max_streams=1)
    abandoned = det.new_stream(seed=7)
    det.push(abandoned, _frames(6, seed=3).tolist())
    det.decode([abandoned], [False])
    del abandoned
    gc.collect()
    frames = _frames(7, seed=4)
    (streamed,) = _stream_all(det, [frames], seeds=[1])
    assert _relative_error(streamed, _whole(model, frames, seed=1)) < 1e-4


def test_a_stream_with_no_frames_ends_empty(model):
    det = SnacDetokenizer(model, max_streams=1)
    stream = det.new_stream()
    assert [len(a) for a in det.decode([stream], [True])] == [0]
    assert det.decode([stream], [True])[0].size == 0  # a second final decode does nothing
    det.new_stream()  # its slot is free again


def test_chunking_facts_are_checked(model):
    with pytest.raises(ValueError, match="large_chunk_frames"):
        SnacDetokenizer(model, chunk_frames=4, large_chunk_frames=3)
    with pytest.raises(ValueError, match="max_streams"):
        SnacDetokenizer(model, max_streams=0)


def test_push_rejects_bad_frames(model):
    det = SnacDetokenizer(model, max_streams=1)
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
    windowed = SNAC(**{**tiny_snac_config(), "attn_window_size": 32})
    with pytest.raises(ValueError, match="local attention"):
        SnacDetokenizer(windowed)


def _relative_error(streamed: np.ndarray, whole: np.ndarray) -> float:
    return float(np.abs(streamed - whole).max() / np.sqrt(np.mean(whole**2)))
