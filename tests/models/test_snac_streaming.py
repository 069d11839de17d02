"""The stateful SNAC decoder (models/codecs/snac_streaming.py): streamed in any chunking, its
audio equals one whole decode of the utterance; rows at different points of their streams
share a call (CPU, tiny SNAC with the published rates, strides and kernels)."""

import logging
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from snac import SNAC

from models.codecs.snac import (
    fold_weight_norm,
    install_positional_noise,
    tiny_snac_config,
)
from models.codecs.snac_streaming import NO_END, StreamingSnacDecoder
from models.device_util import gemms_in_conv_precision

SPF = 2048  # samples per frame at 24 kHz
HOP = 512  # samples per latent step


@pytest.fixture(scope="module")
def model() -> SNAC:
    torch.manual_seed(0)
    model = SNAC(**tiny_snac_config()).eval()
    install_positional_noise(model)
    fold_weight_norm(model)
    return model


def _frames(n: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 4096, size=(n, 7)))


def _whole(model: SNAC, frames: torch.Tensor, seed: int) -> torch.Tensor:
    """One SNAC.decode of the whole utterance, its noise seeded like the stream's."""
    codes = frames[None]
    levels = [codes[:, :, 0], codes[:, :, 1:3].reshape(1, -1), codes[:, :, 3:7].reshape(1, -1)]
    ctx = install_positional_noise(model)
    ctx.seed = torch.tensor([seed])
    try:
        with torch.inference_mode():
            return model.decode(levels)[0, 0]
    finally:
        ctx.seed = None


def _place(audio: torch.Tensor, first: int, total: int, out: torch.Tensor) -> None:
    """Put a call's samples (the first at absolute position `first`) into `out`, dropping
    those before the stream's start or past its end."""
    lo, hi = max(first, 0), min(first + audio.shape[-1], total)
    if hi > lo:
        out[lo:hi] = audio[lo - first : hi - first]


def _streamed(decoder: StreamingSnacDecoder, frames, chunks, seed: int) -> torch.Tensor:
    """Feed `frames` in chunks of the given sizes (frames), then the end: the samples the
    decoder still owes come out of a flush of zero latents."""
    return _streamed_in(decoder, frames, chunks, seed, torch.float32)


def _streamed_in(decoder, frames, chunks, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """_streamed with the decoder's state and latents in `dtype` (float32 audio out)."""
    n = len(frames)
    total = n * SPF
    out = torch.full((total,), float("nan"))
    state = decoder.new_state(1, dtype=dtype)
    seeds = torch.tensor([seed])
    fed = 0
    with torch.inference_mode():
        for size in chunks:
            size = min(size, n - fed)
            if size <= 0:
                break
            position = torch.tensor([4 * fed])
            audio, state = decoder.decode_frames(
                frames[None, fed : fed + size], state, position, torch.tensor([NO_END]), seeds
            )
            _place(audio[0], 4 * fed * HOP - decoder.delay_samples, total, out)
            fed += size
        assert fed == n, "the chunks must cover the utterance"
        flush = math.ceil(decoder.delay_samples / HOP)
        latent = torch.zeros(1, decoder.model.latent_dim, flush, dtype=dtype)
        audio, state = decoder.decode(
            latent, state, torch.tensor([4 * n]), torch.tensor([4 * n]), seeds
        )
        _place(audio[0], 4 * n * HOP - decoder.delay_samples, total, out)
    return out


@pytest.mark.parametrize(
    "chunks",
    [[1] * 14, [1, 1, 2, 4, 6], [3, 8, 3], [14]],
    ids=["frame-by-frame", "ramp", "uneven", "one-call"],
)
def test_streamed_audio_equals_the_whole_decode(model, chunks):
    decoder = StreamingSnacDecoder(model)
    frames = _frames(14, seed=1)
    whole = _whole(model, frames, seed=5)
    streamed = _streamed(decoder, frames, chunks, seed=5)
    assert not torch.isnan(streamed).any(), "every sample of the utterance came out"
    err = (streamed - whole).abs().max() / whole.pow(2).mean().sqrt()
    assert err < 1e-5, f"streamed differs from the whole decode by {err:.2e} of its RMS"


def test_first_audio_needs_three_frames(model):
    """A sample comes out once every latent step it depends on is in: the 24 kHz decoder
    reaches ~2.3 frames to the right (its k7 convs with dilations 1/3/9 at each rate, the
    transposed convs' overlap), so two frames give no audio yet and the third gives its
    first samples, which are already the whole decode's."""
    decoder = StreamingSnacDecoder(model)
    assert 2 * SPF < decoder.delay_samples < 3 * SPF
    frames = _frames(8, seed=2)
    whole = _whole(model, frames, seed=0)
    state, end, seeds = decoder.new_state(1), torch.tensor([NO_END]), torch.tensor([0])
    with torch.inference_mode():
        for fed in range(3):
            audio, state = decoder.decode_frames(
                frames[None, fed : fed + 1], state, torch.tensor([4 * fed]), end, seeds
            )
    out_before = 2 * SPF - decoder.delay_samples  # samples at positions >= 0 after two frames
    assert out_before <= 0
    first = 3 * SPF - decoder.delay_samples
    torch.testing.assert_close(audio[0, -first:], whole[:first], rtol=1e-4, atol=1e-5)


def test_rows_at_different_points_share_a_call(model):
    """A fresh stream and one 5 frames in, decoded together, give what each gives alone."""
    decoder = StreamingSnacDecoder(model)
    a, b = _frames(7, seed=3), _frames(7, seed=4)
    end = torch.tensor([NO_END])
    with torch.inference_mode():
        _, state_b = decoder.decode_frames(
            b[None, :5], decoder.new_state(1), torch.tensor([0]), end, torch.tensor([9])
        )
        alone_a, _ = decoder.decode_frames(
            a[None, :2], decoder.new_state(1), torch.tensor([0]), end, torch.tensor([8])
        )
        alone_b, _ = decoder.decode_frames(
            b[None, 5:7], state_b, torch.tensor([20]), end, torch.tensor([9])
        )
        joint_state = torch.cat([decoder.new_state(1), state_b])
        joint, _ = decoder.decode_frames(
            torch.stack([a[:2], b[5:7]]),
            joint_state,
            torch.tensor([0, 20]),
            torch.tensor([NO_END, NO_END]),
            torch.tensor([8, 9]),
        )
    torch.testing.assert_close(joint[0], alone_a[0])
    torch.testing.assert_close(joint[1], alone_b[0])


def test_a_decoder_with_local_attention_is_refused():
    torch.manual_seed(0)
    with_attention = SNAC(**{**tiny_snac_config(), "attn_window_size": 32})
    with pytest.raises(ValueError, match="local attention"):
        StreamingSnacDecoder(with_attention)


@pytest.mark.parametrize("stride", [2, 4, 8])
def test_upsample_equals_the_transposed_conv(stride):
    """The transposed conv as one GEMM and an overlap-add gives F.conv_transpose1d's samples
    for the new steps (those after the kept one), bias included."""
    from models.codecs.snac_streaming import upsample

    torch.manual_seed(stride)
    conv = torch.nn.ConvTranspose1d(6, 5, kernel_size=2 * stride, stride=stride)
    joined = torch.randn(3, 6, 9)  # the kept step, then 8 new ones
    full = F.conv_transpose1d(joined, conv.weight, conv.bias, stride=stride)
    with torch.inference_mode():
        torch.testing.assert_close(upsample(joined, conv), full[..., stride : 9 * stride])


def test_the_output_convs_taps_equal_the_conv():
    """The decoder's last conv (C channels to one, k 7) as shifted multiply-adds summed over
    channels (what its compiled step runs) gives F.conv1d's values."""
    from models.codecs.snac_streaming import conv_taps

    torch.manual_seed(2)
    conv = torch.nn.Conv1d(5, 1, kernel_size=7)
    joined = torch.randn(3, 5, 20)
    expected = F.conv1d(joined, conv.weight, conv.bias)
    with torch.inference_mode():
        torch.testing.assert_close(conv_taps(joined, conv), expected)


@pytest.mark.parametrize("dilation", [1, 3, 9])
def test_conv_taps_equal_the_grouped_conv(dilation):
    """The depthwise conv as k shifted multiply-adds (what the compiled residual units run)
    gives F.conv1d's values over the same window."""
    from models.codecs.snac_streaming import conv_taps

    torch.manual_seed(dilation)
    conv = torch.nn.Conv1d(4, 4, kernel_size=7, dilation=dilation, groups=4)
    joined = torch.randn(2, 4, 6 * dilation + 11)
    expected = F.conv1d(joined, conv.weight, conv.bias, dilation=dilation, groups=4)
    with torch.inference_mode():
        torch.testing.assert_close(conv_taps(joined, conv), expected)


def test_a_transposed_conv_of_another_kernel_is_refused():
    """The overlap-add needs kernel = 2·stride (every SNAC upsampling block's): another shape
    is refused when the decoder is built, not decoded wrongly."""
    torch.manual_seed(0)
    model = SNAC(**tiny_snac_config()).eval()
    block = model.decoder.model[2].block
    block[1] = torch.nn.ConvTranspose1d(
        block[1].in_channels, block[1].out_channels, kernel_size=3, stride=block[1].stride[0]
    )
    with pytest.raises(ValueError, match="kernel 2·stride"):
        StreamingSnacDecoder(model)


@pytest.mark.parametrize("n", [2, 5, 9])
def test_the_skip_path_is_the_input_delayed_by_the_units_reach(n):
    """A residual unit's skip path: [kept h, x] minus its last h comes out, its last h is kept,
    for calls longer and shorter than h."""
    from models.codecs.snac_streaming import _delayed

    h = 5
    kept, x = torch.randn(2, 3, h), torch.randn(2, 3, n)
    line = torch.cat([kept, x], dim=-1)
    out, new_kept = _delayed(x, kept, h)
    assert torch.equal(out, line[..., :n])
    assert torch.equal(new_kept, line[..., -h:])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pointwise_equals_the_1x1_conv(dtype):
    """A 1×1 conv as the units and noise steps run it (a matmul in half precision, the conv
    in float32) gives the conv's values, bias included."""
    from models.codecs.snac_streaming import pointwise

    torch.manual_seed(1)
    conv = torch.nn.Conv1d(6, 4, kernel_size=1).to(dtype)
    x = torch.randn(3, 6, 10, dtype=dtype)
    with torch.inference_mode():
        expected = conv(x)
        got = pointwise(x, conv)
    assert got.dtype == dtype and got.shape == expected.shape
    torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=2e-2)


def test_a_half_precision_decoder_decodes_as_float32_does(model):
    """The decoder in bfloat16 (its 1×1 convs then run as matmuls) streams what float32 does,
    to bfloat16's rounding: a wrong half-precision path would be off by the signal itself."""
    import copy

    frames = _frames(6, seed=2)
    reference = _streamed(StreamingSnacDecoder(model), frames, [2, 4], seed=5)
    half = copy.deepcopy(model).to(torch.bfloat16)
    decoder = StreamingSnacDecoder(half)
    got = _streamed_in(decoder, frames, [2, 4], seed=5, dtype=torch.bfloat16)
    error = (got - reference).pow(2).mean().sqrt() / reference.pow(2).mean().sqrt()
    assert error < 0.05, f"relative RMS error {error:.3f}"


@pytest.mark.parametrize("conv_precision", ["tf32", "ieee"])
def test_float32_gemms_follow_the_convs_precision(conv_precision):
    """The stateful decoder's GEMM forms of SNAC's convs run in the arithmetic its cuDNN convs
    do: TF32 where those may, IEEE float32 where a user (or a test) asked for it."""
    before = torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cudnn.conv.fp32_precision = conv_precision
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        gemms_in_conv_precision()
        assert torch.backends.cuda.matmul.fp32_precision == conv_precision
    finally:
        torch.backends.cudnn.conv.fp32_precision = before[0]
        torch.backends.cuda.matmul.fp32_precision = before[1]


def test_without_its_triton_kernels_the_decoder_keeps_the_torch_ops(model, monkeypatch, caplog):
    """Where the kernels cannot load (a CUDA install without Triton, or a Triton too old for
    them), asking for them leaves the torch ops serving, with a warning saying why: the codec
    still decodes, its residual units among the compiled blocks."""
    monkeypatch.setitem(sys.modules, "models.codecs.snac_triton", None)  # the import fails
    decoder = StreamingSnacDecoder(model)
    blocks = len(decoder.repeated_blocks())
    with caplog.at_level(logging.WARNING, logger="models.codecs.snac_streaming"):
        decoder.use_triton_kernels()
    assert decoder.kernels is None and len(decoder.repeated_blocks()) == blocks
    assert "Triton kernels did not load" in caplog.text and "snac_triton" in caplog.text
    frames = _frames(6, seed=2)
    reference = _streamed(StreamingSnacDecoder(model), frames, [6], seed=1)
    torch.testing.assert_close(_streamed(decoder, frames, [6], seed=1), reference)
