"""Mimi codec: published-layout loading, and streamed-in-chunks equals decoded-at-once, batched
across streams at different positions (CPU, tiny)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.checkpoint_errors import CheckpointError
from models.codecs.mimi import MimiDetokenizer, build_mimi, load_mimi
from models.csm.configs import TINY_CSM

K = 32  # codebooks (CSM's)
SPF = 1920  # samples per 80 ms frame at 24 kHz
# The tiny codec with an attention window of 8 steps (4 frames): utterances of 9-30 frames make
# the window slide, which the real 250-step window would need 10 s of audio to show.
CONFIG = {**TINY_CSM["codec_config"], "sliding_window": 8}
# Chunked and whole decodes sum the same terms in different orders, so they differ by float32
# rounding: max |chunked - whole| measured 5.0e-6 .. 7.5e-6 · RMS on this test's four streams.
# A state bug shows at O(RMS) (transformers' frame-by-frame decode is off by ~9 · RMS), so
# 1e-4 · RMS sits 13x above rounding and four orders of magnitude below any real error.
TOLERANCE = 1e-4


def tiny_mimi(seed: int = 0):
    torch.manual_seed(seed)
    mimi = build_mimi(CONFIG)
    with torch.no_grad():  # random centroids (transformers starts them at zero)
        for name, buffer in mimi.named_buffers():
            if name.endswith("codebook.embed_sum"):
                buffer.normal_()
    return mimi.eval()


@pytest.fixture(scope="module")
def mimi():
    return tiny_mimi()


def codes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, size=(n, K))


def hf_whole(mimi, frames: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        return mimi.decode(torch.from_numpy(frames).T[None]).audio_values[0, 0].numpy()


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.sqrt(np.mean(b**2)))


def test_one_call_equals_transformers_whole_decode(mimi):
    det = MimiDetokenizer(mimi)
    frames = codes(12, seed=1)
    stream = det.new_stream()
    det.push(stream, frames.tolist())
    (audio,) = det.decode([stream])
    assert audio.dtype == np.float32 and len(audio) == 12 * SPF
    assert rel_err(audio, hf_whole(mimi, frames)) < 1e-6  # same ops on the same lengths


@pytest.mark.parametrize("pad", [False, True], ids=["exact-batch", "padded-batch"])
def test_chunked_batched_decoding_equals_whole_decoding(mimi, pad):
    """Four streams of different lengths, pushed 1-4 frames at a time (a per-stream pattern),
    decoded together each round: streams at different positions share decoder calls. Padded
    (as on CUDA): groups of 3 run as 4 with a silent stream, which must not touch the others."""
    det = MimiDetokenizer(mimi)
    det.pad_batches = pad
    utterances = [codes(n, seed=10 + n) for n in (23, 9, 17, 30)]
    streams = [det.new_stream() for _ in utterances]
    pushed = [0] * len(utterances)
    audio: list[list[np.ndarray]] = [[] for _ in utterances]
    round_ = 0
    while any(p < len(u) for p, u in zip(pushed, utterances, strict=True)):
        for i, u in enumerate(utterances):
            step = 1 + (round_ + i) % 4
            det.push(streams[i], u[pushed[i] : pushed[i] + step].tolist())
            pushed[i] = min(len(u), pushed[i] + step)
        for i, chunk in enumerate(det.decode(streams)):
            audio[i].append(chunk)
        round_ += 1
    errors = []
    for u, pieces in zip(utterances, audio, strict=True):
        streamed = np.concatenate(pieces)
        assert len(streamed) == len(u) * SPF
        errors.append(rel_err(streamed, hf_whole(mimi, u)))
    assert max(errors) < TOLERANCE, errors


def test_transformers_frame_by_frame_decoding_differs(mimi):
    """Why the streaming decoder exists: transformers carries the transformer's KV cache but
    restarts every SEANet convolution from zero padding at each call."""
    frames = codes(10, seed=3)
    cache, pieces = None, []
    with torch.inference_mode():
        for t in range(len(frames)):
            out = mimi.decode(
                torch.from_numpy(frames[t : t + 1]).T[None], decoder_cache=cache, use_cache=True
            )
            cache = out.decoder_cache
            pieces.append(out.audio_values[0, 0].numpy())
    assert rel_err(np.concatenate(pieces), hf_whole(mimi, frames)) > 0.1


def test_push_checks_codes(mimi):
    det = MimiDetokenizer(mimi)
    stream = det.new_stream()
    with pytest.raises(ValueError, match="hold 32 codes"):
        det.push(stream, [[0] * 31])
    with pytest.raises(ValueError, match=r"\[0, 2048\)"):
        det.push(stream, [[2048] + [0] * 31])
    (audio,) = det.decode([stream])  # nothing was accepted
    assert len(audio) == 0


def test_load_published_layout_and_name_the_missing_tensor(mimi, tmp_path):
    from safetensors.torch import load_file, save_file

    mimi.save_pretrained(tmp_path / "mimi")  # transformers writes kyutai/mimi's flat names
    names = load_file(str(tmp_path / "mimi" / "model.safetensors"))
    assert (
        "decoder.layers.0.conv.weight" in names
        and "decoder_transformer.layers.0.mlp.fc1.weight" in names
    )
    loaded = load_mimi(str(tmp_path / "mimi"))
    frames = codes(5, seed=4)
    assert np.array_equal(hf_whole(loaded, frames), hf_whole(mimi, frames))

    del names["upsample.conv.weight"]
    save_file(names, str(tmp_path / "mimi" / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing: decoder\.upsample\.conv\.weight"):
        load_mimi(str(tmp_path / "mimi"))


def test_codebooks_used_before_a_move_are_not_left_behind():
    """transformers caches a codebook on first use, as a plain attribute that `.to()` does not
    move: random weights are made audible by decoding once (on the CPU), and the served model
    then failed on the GPU with the cache still on the CPU. A change of dtype shows the same
    on the CPU."""
    from models.codecs.mimi import make_audible

    mimi = make_audible(tiny_mimi(), torch.Generator().manual_seed(0)).double()
    det = MimiDetokenizer(mimi)
    stream = det.new_stream()
    det.push(stream, codes(3, seed=4).tolist())
    (audio,) = det.decode([stream])
    assert len(audio) == 3 * SPF and np.isfinite(audio).all()


def test_codebooks_used_before_a_weight_load_follow_the_loaded_weights(tmp_path):
    """A codebook cached before `load_mimi_weights` would decode with the old centroids."""
    from models.codecs.mimi import load_mimi_weights

    stale, source = tiny_mimi(seed=0), tiny_mimi(seed=1)
    frames = codes(4, seed=2)
    hf_whole(stale, frames)  # caches seed 0's codebooks
    flat = {name: t.clone() for name, t in source.state_dict().items()}
    load_mimi_weights(stale, flat.items(), "a test")
    assert rel_err(hf_whole(stale, frames), hf_whole(source, frames)) == 0.0
