"""Mimi (kyutai/mimi) as a batched, streaming detokenizer, shared by every Mimi-based model
(CSM today; Moshi and Qwen3-style models later), plus the encoder for reference audio.

The architecture and weights are transformers' `MimiModel` (transformers ≥ 5); this module
loads it from the published flat tensor layout (kyutai/mimi's `model.safetensors`, or the
`codec_model.` tensors inside sesame/csm-1b), and decodes per-request code streams with the
explicit state of `mimi_streaming.StreamingMimiDecoder`. A frame is `num_quantizers` codes
(32 for CSM) and decodes to 1920 samples at 24 kHz (80 ms).

Mimi's decoder is causal end to end, so unlike SNAC it needs no look-ahead and no overlapping
windows: each call decodes exactly the frames pushed since the last one, and the carried state
makes the result equal to one whole decode. Measured on CPU float32, max |chunked - whole| /
RMS(whole) over irregular 1–7 frame chunks: 3.6e-6 (tiny config, 23 frames) and 8.5e-6 (the
real kyutai/mimi shape with random weights, 300 frames, so the 250-step attention window
slides): float rounding from summing the same terms in a different order. transformers' own
frame-by-frame decode (its KV cache, but zero conv padding at every call) differs from the
whole decode by 9.4 × RMS on the same tiny test.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.checkpoint_errors import CheckpointError, check_state_dict
from models.codecs.audible_weights import scale_output
from models.codecs.mimi_streaming import StreamingMimiDecoder
from models.codecs.slot_states import SCRATCH, SlottedCalls, StateSlots
from models.codecs.stream_batching import buckets_up_to, decode_by_length, padded_batch
from models.device_util import download, upload

DEFAULT_REPO = "kyutai/mimi"

# The published checkpoints are flat (`encoder.layers…`, `decoder_transformer…`); transformers 5
# nests them under its encoder/decoder halves. Prefix renames, first match wins.
_FLAT_TO_MODULE = (
    ("encoder.layers.", "encoder.encoder_seanet.layers."),
    ("encoder_transformer.", "encoder.encoder_transformer."),
    ("downsample.", "encoder.downsample."),
    ("upsample.", "decoder.upsample."),
    ("decoder_transformer.", "decoder.decoder_transformer."),
    ("decoder.layers.", "decoder.decoder_seanet.layers."),
)


MIN_TRANSFORMERS = "5.21"


def require_transformers():
    """Import transformers' Mimi, or say how to get it."""
    try:
        from transformers import MimiConfig, MimiModel
        from transformers.models.mimi import modeling_mimi
    except ImportError as exc:
        raise CheckpointError(
            f"Mimi-based models (CSM, Moshi) need the `transformers` package (>= {MIN_TRANSFORMERS}): "
            "pip install 'voxgate[csm]'"
        ) from exc
    # The streaming decoder drives transformers' module layout, which moved the upsampling
    # and decoder transformer under `decoder` (MimiDecoderModel) in 5.21.
    if not hasattr(modeling_mimi, "MimiDecoderModel"):
        import transformers

        raise CheckpointError(
            f"Mimi-based models (CSM, Moshi) need transformers >= {MIN_TRANSFORMERS}, found "
            f"{transformers.__version__}: pip install -U 'transformers>={MIN_TRANSFORMERS}'"
        )
    return MimiConfig, MimiModel


# Loading --------------------------------------------------------------------------------------


# What random weights' audio spreads by (make_audible).
RANDOM_OUTPUT_STD = 0.1


@torch.no_grad()
def draw_codebooks(mimi, gen: torch.Generator | None = None) -> None:
    """transformers starts Mimi's codebooks at zeros (learned by EMA), which would make every
    code decode (and every frame encode) alike: random centroids make codes matter."""
    for name, buffer in mimi.named_buffers():
        if name.endswith("codebook.embed_sum"):
            buffer.copy_(torch.randn(buffer.shape, generator=gen).to(buffer))
        elif name.endswith("codebook.cluster_usage"):
            buffer.fill_(1.0)


def forget_codebook_cache(mimi) -> None:
    """Drop transformers' cached codebooks (`MimiEuclideanCodebook._embed`, built from
    `embed_sum / cluster_usage` on first use): the cache is a plain attribute, so neither
    `load_state_dict` nor `.to(device)` touches it, and a codebook used once before either
    (make_audible decodes on the CPU) would stay stale or on the wrong device."""
    for module in mimi.modules():
        if hasattr(module, "_embed"):
            module._embed = None


@torch.no_grad()
def make_audible(mimi, gen: torch.Generator | None = None):
    """Random Mimi weights whose audio follows the codes and stays within [-1, 1]; returns
    `mimi`. Its codebooks drawn (draw_codebooks); its convolutions' init makes audio that
    spreads by ~5, clipped over most of its samples on the way out: the last one is scaled so
    that audio of random codes spreads by RANDOM_OUTPUT_STD, its peaks then within 1
    (models/codecs/audible_weights.py). On the meta device (shapes only) nothing is probed."""
    draw_codebooks(mimi, gen)
    last = [m for m in mimi.decoder.modules() if isinstance(m, torch.nn.Conv1d)][-1]
    if last.weight.is_meta:
        return mimi
    cfg = mimi.config
    codes = torch.randint(0, cfg.codebook_size, (1, cfg.num_quantizers, 16), generator=gen)
    codes = codes.to(last.weight.device)
    scale_output(last, lambda: mimi.decode(codes), RANDOM_OUTPUT_STD)
    forget_codebook_cache(mimi)
    return mimi


def build_mimi(config: dict):
    """An uninitialised MimiModel from a config.json-style dict (the `codec_config` of CSM)."""
    mimi_config_cls, mimi_cls = require_transformers()
    try:
        config = mimi_config_cls.from_dict(dict(config))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"the Mimi codec config is not valid: {exc}") from exc
    return mimi_cls(config).eval()


def load_mimi_weights(mimi, tensors: Iterable[tuple[str, torch.Tensor]], where: str) -> None:
    """Copy flat-layout tensors (names without any `codec_model.` prefix) into `mimi`; raise
    CheckpointError naming missing, unexpected or mis-shaped tensors."""
    state = {_module_name(name): t for name, t in tensors}
    check_state_dict(mimi.state_dict(), state, f"the Mimi tensors of {where}")
    mimi.load_state_dict(state, strict=True)
    forget_codebook_cache(mimi)


def _module_name(flat: str) -> str:
    for old, new in _FLAT_TO_MODULE:
        if flat.startswith(old):
            return new + flat[len(old) :]
    return flat


def load_mimi(source: str, device: torch.device | str = "cpu"):
    """A standalone Mimi in the kyutai/mimi layout (config.json + model.safetensors), from a
    folder or a Hugging Face repo id."""
    from models.loader import iter_safetensors, resolve_source

    folder = resolve_source(source, required=("config.json", "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "mimi":
        raise CheckpointError(
            f"{folder}/config.json is not a Mimi codec (model_type must be 'mimi')"
        )
    mimi = build_mimi(config)
    load_mimi_weights(mimi, iter_safetensors(Path(folder)), str(folder))
    return mimi.to(device)


# Streaming ------------------------------------------------------------------------------------


@dataclass
class MimiStream:
    """One request's decoder stream: frames waiting to be decoded, how far the stream is, and
    its row in the decoder's state slots (None until its first decode)."""

    pending: list[list[int]] = field(default_factory=list)
    frames_decoded: int = 0
    slot: int | None = None


class MimiDetokenizer:
    """Per-request Mimi code streams → audio chunks; streams with the same number of pending
    frames share one decoder call. Each stream's decoder state stays in place on the device
    (models/codecs/slot_states.py); with the engine's CUDA graphs (`enable_cuda_graphs`) each
    bucket's call, dequantizing, the state's gather and write-back included, is one replay."""

    def __init__(
        self,
        mimi,
        first_chunk_frames: int = 1,
        chunk_frames: int = 2,
        num_codebooks: int | None = None,
    ) -> None:
        """`num_codebooks`: codes per frame when a model uses fewer than the codec's
        `num_quantizers` (Moshi: the first 8 of 32)."""
        for name, value in (
            ("first_chunk_frames", first_chunk_frames),
            ("chunk_frames", chunk_frames),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        forget_codebook_cache(mimi)  # a cache built before mimi moved to its device stays behind
        self.model = mimi.eval()
        self.decoder = StreamingMimiDecoder(mimi)
        cfg = mimi.config
        self.num_codebooks = int(num_codebooks or cfg.num_quantizers)
        self.codebook_size = int(cfg.codebook_size)
        self.sample_rate = int(cfg.sampling_rate)
        self.frame_rate = float(cfg.frame_rate)
        self.samples_per_frame = round(self.sample_rate / self.frame_rate)
        # Decoder transformer steps per frame (the upsample's stride; 2 for 12.5 Hz Mimi).
        self.steps_per_frame = (
            1 if mimi.decoder.upsample is None else mimi.decoder.upsample.conv.stride[0]
        )
        self.first_chunk = first_chunk_frames
        self.chunk = chunk_frames
        param = next(mimi.parameters())
        self.device, self.dtype = param.device, param.dtype
        with torch.inference_mode():
            fresh = self.decoder.initial_state(1, self.device, self.dtype)
            self.slots = StateSlots([t[0] for t in fresh])
        # Pad each call to a batch bucket (models/codecs/stream_batching.py says why).
        self.pad_batches = self.device.type == "cuda"
        self.calls = SlottedCalls(self.slots)  # replayed from CUDA graphs once captured

    def new_stream(self) -> MimiStream:
        return MimiStream()

    def push(self, stream: MimiStream, frames: list[list[int]]) -> None:
        """Append frames of `num_codebooks` codes, each in [0, codebook_size)."""
        for frame in frames:
            if len(frame) != self.num_codebooks:
                raise ValueError(f"Mimi frames hold {self.num_codebooks} codes, got {len(frame)}")
            if min(frame) < 0 or max(frame) >= self.codebook_size:
                raise ValueError(
                    f"Mimi codes must lie in [0, {self.codebook_size}), "
                    f"got {min(frame)}..{max(frame)}"
                )
        stream.pending.extend(frames)

    @torch.inference_mode()
    def decode(self, streams: list[MimiStream]) -> list[np.ndarray]:
        """Decode every stream's pending frames (float32 mono, possibly empty) and advance it.
        No flush is ever needed: a causal decoder has nothing held back."""
        return decode_by_length(streams, self._decode_group)

    def _decode_group(self, group: list[MimiStream]) -> list[np.ndarray]:
        real, frames = len(group), len(group[0].pending)
        batch = padded_batch(real) if self.pad_batches else real
        pad = batch - real  # silent rows on the scratch slot, decoded and dropped
        silence = [[0] * self.num_codebooks] * frames
        codes = [s.pending for s in group] + [silence] * pad
        rows = [self.slots.bind(s) for s in group] + [SCRATCH] * pad
        steps = [s.frames_decoded * self.steps_per_frame for s in group] + [0] * pad
        inputs = [
            upload(codes, torch.long, self.device),  # [B, n, K]
            upload(rows, torch.long, self.device),
            upload(steps, torch.long, self.device),
        ]
        key = ("mimi-decode", batch, frames)
        audio = self.calls.run(key, self._decode_call, inputs)
        audio = download(audio[:real])
        for s in group:
            s.frames_decoded += len(s.pending)
            s.pending = []
        return list(audio)

    def _decode_call(self, codes: torch.Tensor, rows: torch.Tensor, steps: torch.Tensor):
        """codes [B, n, K] → mono audio [B, n · frame] (float32), the rows' state advanced."""
        latents = self.model.quantizer.decode(codes.transpose(1, 2)).to(self.dtype)  # [B, D, n]
        audio, state = self.decoder.decode_step(latents, steps, self.slots.gather(rows))
        self.slots.scatter(rows, state)
        return audio[:, 0].float()  # mono: channel 0

    def enable_cuda_graphs(self, graphs) -> None:
        """Replay each padded batch shape's call from the engine's CallableGraphs once
        `warm_up_batches` has captured them (the engine calls this first)."""
        self.calls.enable(graphs)

    @torch.inference_mode()
    def warm_up_batches(self, max_batch: int, frames: tuple[int, ...] = (1,)) -> None:
        """Size the state slots for `max_batch` streams and run every padded batch shape up to
        it once, for each number of frames per call, so no serving tick pays cuDNN's first-use
        plan building; with graphs enabled, capture each shape instead (largest first, so the
        smaller ones reuse its pool memory)."""
        if not self.pad_batches:
            return
        self.slots.size_for(max_batch)
        for batch in reversed(buckets_up_to(max_batch)):
            for n in frames:
                inputs = [
                    torch.zeros(batch, n, self.num_codebooks, dtype=torch.long, device=self.device),
                    torch.full((batch,), SCRATCH, dtype=torch.long, device=self.device),
                    torch.zeros(batch, dtype=torch.long, device=self.device),
                ]
                self.calls.warm(("mimi-decode", batch, n), self._decode_call, inputs)
        self.calls.warmed()

    # --- the encoder (reference audio for voice prompts) -----------------------------------------
    @torch.inference_mode()
    def encode(self, audio: np.ndarray) -> np.ndarray:
        """float32 mono audio at `sample_rate` → codes [frames, num_codebooks] (int64), as
        transformers' CSM encodes its context audio: one whole-clip `MimiModel.encode`."""
        wave = torch.as_tensor(np.asarray(audio, dtype=np.float32), device=self.device)
        if wave.ndim != 1 or wave.numel() < self.samples_per_frame:
            raise ValueError(
                f"reference audio must be mono and at least one frame ({self.samples_per_frame} "
                f"samples) long, got shape {tuple(wave.shape)}"
            )
        codes = self.model.encode(wave[None, None].to(self.dtype)).audio_codes  # [1, K, T]
        return codes[0].T.cpu().numpy()
