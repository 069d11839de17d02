"""SNAC 24 kHz (hubertsiuzdak/snac_24khz) as a batched, streaming detokenizer.

The architecture is the `snac` package's `SNAC`; this module loads and saves it in the published
layout, makes its decoder's noise deterministic, and decodes per-request code streams in windows.
A frame is 7 codes in SNAC hierarchical order `[l0, l1a, l1b, l2a, l2b, l2c, l2d]` (one level-0,
two level-1, four level-2 codes) and decodes to 2048 samples (4 latent steps of 512). Orpheus
interleaves its 7 tokens differently; reordering them is the Orpheus model's job.

Windows: to emit frames [s, e) the decoder runs on frames [max(0, s-L), min(n, e+R)) and the
samples of [s, e) are cut out. A stream's first window starts at frame 0 and its final one ends at
its last frame, exactly the edges a whole decode sees, so the only mismatch is at interior seams,
where a window's zero padding stands in for real activations. The decoder is all symmetric convs
(latent k7; per upsampling block a transposed conv k=2·stride and k7 residual units dilated
1/3/9; output k7): changing one frame moves samples ≈2.3 frames to each side of it (measured), so
L = R = 3 see everything an emitted sample depends on. Orpheus's reference server decodes 4-frame
windows and keeps the 2nd frame (L=1, R=2), which cuts the left side short.

Seam error vs one whole decode (40 random frames, random weights, CPU float32, a seam after every
frame): max |streamed - whole| / RMS(whole), and in brackets RMS(streamed - whole) / RMS(whole).

    (L, R)        (1, 2) Orpheus    (2, 2)           (3, 1)           (3, 2) default   (3, 3)
    tiny 16/64    7.1e-2 (4.0e-3)   1.1e-3 (4.7e-5)  6.9e-2 (4.2e-3)  1.1e-3 (3.0e-5)  1.1e-6 (2.2e-7)
    real 48/1024  9.8e-2 (9.8e-3)   2.3e-3 (1.3e-4)  1.1e-1 (1.1e-2)  2.3e-3 (9.4e-5)  3.5e-6 (6.6e-7)

Defaults L=3 (costs compute only), R=2: first audio once first_chunk_frames + 2 frames exist, with
a seam error ~1e-4 of the signal RMS (-80 dB); lookahead_frames=3 makes seams exact (float
rounding) for one more frame (7 tokens, 85 ms) of time to first audio. These are random weights;
re-measure with the trained checkpoint before tightening the defaults.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from huggingface_hub import snapshot_download
from snac import SNAC
from snac.layers import DecoderBlock, NoiseBlock
from torch import nn

from models.checkpoint_errors import CheckpointError

DEFAULT_REPO = "hubertsiuzdak/snac_24khz"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "pytorch_model.bin"


def snac_24khz_config() -> dict:
    """Constructor arguments of the published hubertsiuzdak/snac_24khz config.json."""
    return {
        "sampling_rate": 24000,
        "encoder_dim": 48,
        "encoder_rates": [2, 4, 8, 8],
        "decoder_dim": 1024,
        "decoder_rates": [8, 8, 4, 2],
        "attn_window_size": None,
        "codebook_size": 4096,
        "codebook_dim": 8,
        "vq_strides": [4, 2, 1],
        "noise": True,
        "depthwise": True,
    }


def tiny_snac_config() -> dict:
    """snac_24khz scaled down in width only: same rates, strides, kernels and codebooks, so the
    same hop (512), frame (7 codes → 2048 samples) and receptive field; fast enough for tests."""
    return {**snac_24khz_config(), "encoder_dim": 16, "decoder_dim": 64}


# Loading and saving -----------------------------------------------------------------------------


def load_snac(
    source: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> SNAC:
    """Load SNAC from a folder in the published layout (config.json + pytorch_model.bin) or a
    Hugging Face repo id such as `hubertsiuzdak/snac_24khz`. Raises CheckpointError naming the
    file or tensor at fault. The decoder's noise is made positional (see PositionalNoise)."""
    folder = _resolve(source)
    config_path = folder / CONFIG_FILE
    config = _read_config(config_path)
    try:
        model = SNAC(**config)
    except TypeError as e:
        raise CheckpointError(
            f"{config_path} does not hold SNAC constructor arguments ({e}); "
            f"compare it with the config.json of {DEFAULT_REPO}"
        ) from e
    weights_path = folder / WEIGHTS_FILE
    state = _modern_weight_norm_names(_read_weights(weights_path))
    _check_tensors(model, state, weights_path)
    model.load_state_dict(state, strict=True)
    install_positional_noise(model)
    return model.to(device=device, dtype=dtype).eval()


def save_snac(model: SNAC, folder: str | Path) -> Path:
    """Write `model` in the published layout, which `load_snac` reads back."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(snac_config(model), indent=2) + "\n")
    state = {name: t.detach().to("cpu") for name, t in model.state_dict().items()}
    torch.save(state, folder / WEIGHTS_FILE)
    return folder


def snac_config(model: SNAC) -> dict:
    """The constructor arguments of `model`. SNAC keeps most as attributes; `noise` and
    `depthwise` are read off the decoder's structure. latent_dim is written only when it is not
    the derived default, as in the published configs."""
    config = {
        "sampling_rate": int(model.sampling_rate),
        "encoder_dim": int(model.encoder_dim),
        "encoder_rates": [int(r) for r in model.encoder_rates],
        "decoder_dim": int(model.decoder_dim),
        "decoder_rates": [int(r) for r in model.decoder_rates],
        "attn_window_size": model.attn_window_size,
        "codebook_size": int(model.codebook_size),
        "codebook_dim": int(model.codebook_dim),
        "vq_strides": [int(s) for s in model.vq_strides],
        "noise": any(isinstance(m, NoiseBlock | PositionalNoise) for m in model.decoder.modules()),
        "depthwise": model.decoder.model[0].groups > 1,
    }
    if model.latent_dim != model.encoder_dim * 2 ** len(model.encoder_rates):
        config["latent_dim"] = int(model.latent_dim)
    return config


def _resolve(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(
            f"{source} is a file; pass the folder holding {CONFIG_FILE} and {WEIGHTS_FILE}"
        )
    if source.startswith((".", "/", "~")):
        raise CheckpointError(
            f"SNAC checkpoint folder {source} does not exist; pass a folder with {CONFIG_FILE} "
            f"and {WEIGHTS_FILE} (the layout of {DEFAULT_REPO}) or a Hugging Face repo id"
        )
    try:
        return Path(snapshot_download(source, allow_patterns=[CONFIG_FILE, WEIGHTS_FILE]))
    except (OSError, ValueError) as e:  # hub HTTP/offline errors are OSError, bad ids ValueError
        raise CheckpointError(
            f"could not fetch {source!r} from the Hugging Face Hub ({e}). Without network, "
            f"download it where there is (`hf download {source} --local-dir DIR`) and pass DIR"
        ) from e


def _read_config(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing; a SNAC checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE} "
            f"(the layout of {DEFAULT_REPO})"
        )
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); re-download it") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} must hold a JSON object of SNAC constructor arguments")
    return config


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing; a SNAC checkpoint folder needs {CONFIG_FILE} and {WEIGHTS_FILE} "
            f"(the layout of {DEFAULT_REPO})"
        )
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except (RuntimeError, OSError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise CheckpointError(
            f"{path} is not a readable torch state dict ({e}); re-download it"
        ) from e
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise CheckpointError(f"{path} must hold a flat state dict of tensors")
    return state


def _modern_weight_norm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The published snac_24khz pytorch_model.bin (269 tensors) already uses the parametrization
    names `<conv>.parametrizations.weight.original0/1` of torch.nn.utils.parametrizations
    .weight_norm, which the snac package builds. Checkpoints saved with the older
    torch.nn.utils.weight_norm name the same tensors `<conv>.weight_g/weight_v` (same shapes:
    magnitude, direction); rename those so both load."""
    renamed = {}
    for name, tensor in state.items():
        for old, new in (("weight_g", "original0"), ("weight_v", "original1")):
            if name.endswith("." + old):
                name = f"{name[: -len(old)]}parametrizations.weight.{new}"
        renamed[name] = tensor
    return renamed


def _check_tensors(model: SNAC, state: dict[str, torch.Tensor], path: Path) -> None:
    """load_state_dict(strict=True) would also refuse, but in one long RuntimeError; name the
    first few offenders and say what to do."""
    expected = model.state_dict()
    missing = [n for n in expected if n not in state]
    unexpected = [n for n in state if n not in expected]
    wrong = [
        f"{n} {tuple(state[n].shape)} (config wants {tuple(t.shape)})"
        for n, t in expected.items()
        if n in state and state[n].shape != t.shape
    ]
    problems = [
        f"{what}: {', '.join(names[:5])}{' …' if len(names) > 5 else ''} ({len(names)} in all)"
        for what, names in (("missing", missing), ("unexpected", unexpected), ("shape", wrong))
        if names
    ]
    if problems:
        raise CheckpointError(
            f"{path} does not match the SNAC built from {CONFIG_FILE}: {'; '.join(problems)}. "
            "Check that config.json belongs to these weights, or re-download the folder."
        )


# Deterministic noise --------------------------------------------------------------------------

_M32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**27, so (uint32 * _MIX) never overflows int64


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (xorshift-multiply) on int64 tensors holding uint32 values."""
    x = ((x >> 16) ^ x) * _MIX & _M32
    x = ((x >> 16) ^ x) * _MIX & _M32
    return (x >> 16) ^ x


def positional_normal(
    seed: torch.Tensor, salt: int, start: torch.Tensor, length: int
) -> torch.Tensor:
    """Standard-normal noise that is a pure function of (seed, salt, absolute position); salt
    tells the decoder's noise blocks apart. seed, start: [B] int64; returns [B, length] float32
    for positions start .. start+length-1."""
    pos = start[:, None] + torch.arange(length, device=start.device)  # [B, length]
    stream_key = _hash32((_hash32(seed[:, None] & _M32) + salt) & _M32)  # [B, 1]
    key = _hash32(stream_key ^ (pos & _M32))  # distinct per position within a 2**32 period
    u1 = ((_hash32(key ^ 0x68E31DA4) >> 8).float() + 0.5) * 2.0**-24  # in (0, 1)
    u2 = (_hash32(key ^ 0x1B56C4E9) >> 8).float() * 2.0**-24
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)  # Box-Muller


@dataclass
class NoiseContext:
    """Per-call input to every PositionalNoise of one model: where each batch row starts in its
    stream and which seed it uses. SNAC.decode takes only codes, so it travels beside the call;
    None means offset 0 and seed 0 (a whole-utterance decode)."""

    latent_offset: torch.Tensor | None = None  # [B] int64, latent steps before the window
    seed: torch.Tensor | None = None  # [B] int64

    def rows(self, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        zeros = torch.zeros(batch, dtype=torch.int64, device=device)
        offset = zeros if self.latent_offset is None else self.latent_offset.to(device)
        seed = zeros if self.seed is None else self.seed.to(device)
        return offset, seed


class PositionalNoise(nn.Module):
    """Drop-in for snac's NoiseBlock (x + N(0,1) · linear(x)) whose noise is a function of the
    absolute sample position in the stream instead of torch.randn. Why: with randn every decode
    differs, so a streamed window could never equal the whole decode and tests could not pin the
    output. Keeping noise (rather than switching it off) keeps the decoder on the distribution it
    was trained with; positional noise keeps the same N(0,1) statistics, is reproducible per
    stream seed, and is identical wherever a window overlaps the whole decode."""

    def __init__(self, linear: nn.Module, salt: int, samples_per_latent: int, ctx: NoiseContext):
        super().__init__()
        self.linear = linear  # the original weight-normed conv: state-dict names are unchanged
        self.salt = salt
        self.samples_per_latent = samples_per_latent  # time steps per latent step at this block
        self.ctx = ctx

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [B, C, T]
        offset, seed = self.ctx.rows(x.shape[0], x.device)
        noise = positional_normal(seed, self.salt, offset * self.samples_per_latent, x.shape[-1])
        return x + noise[:, None, :].to(x.dtype) * self.linear(x)


def install_positional_noise(model: SNAC) -> NoiseContext:
    """Swap every decoder NoiseBlock for PositionalNoise (idempotent); return the shared context."""
    for module in model.decoder.modules():
        if isinstance(module, PositionalNoise):
            return module.ctx
    ctx = NoiseContext()
    upsampling = 1
    blocks = [layer for layer in model.decoder.model if isinstance(layer, DecoderBlock)]
    for index, block in enumerate(blocks):
        upsampling *= block.block[1].stride[0]  # block = [Snake1d, ConvTranspose1d, NoiseBlock?, …]
        for i, sub in enumerate(block.block):
            if isinstance(sub, NoiseBlock):
                block.block[i] = PositionalNoise(sub.linear, index, upsampling, ctx)
    return ctx


def fold_weight_norm(model: nn.Module) -> None:
    """Bake every weight-norm parametrisation into a plain weight. Decoding then reads one
    tensor per conv instead of recomputing g·v/|v| (hundreds of small kernels) on every call;
    the outputs are the same up to float rounding. Do this after loading: the folded module's
    state-dict names are no longer the published ones."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)


# Streaming ------------------------------------------------------------------------------------


@dataclass
class SnacStream:
    """One request's detokenizer state. Frames older than the left context of the next window
    are dropped, so memory stays bounded however long the utterance."""

    seed: int = 0  # noise seed (PositionalNoise)
    frames: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), dtype=np.int64))  # [N, 7]
    base: int = 0  # absolute index of frames[0]
    emitted: int = 0  # frames whose audio has been returned
    finished: bool = False  # final flush done; no more frames accepted

    @property
    def total(self) -> int:
        """Frames pushed so far."""
        return self.base + len(self.frames)

    def window(self, lo: int, hi: int) -> np.ndarray:
        """Frames [lo, hi) by absolute index: [hi - lo, 7]."""
        return self.frames[lo - self.base : hi - self.base]


@dataclass(frozen=True)
class _Window:
    row: int  # index into the streams of this decode call
    start: int  # first frame to emit
    end: int  # one past the last frame to emit
    lo: int  # first frame decoded (start minus left context)
    hi: int  # one past the last frame decoded (end plus lookahead)


class SnacDetokenizer:
    """Turns per-request SNAC frames into audio chunks, batching windows of equal length from
    all streams into one SNAC.decode call. Settings are in frames (2048 samples, 7 codes)."""

    def __init__(
        self,
        model: SNAC,
        left_context_frames: int = 3,
        lookahead_frames: int = 2,
        chunk_frames: int = 4,
        first_chunk_frames: int = 1,
    ):
        if model.attn_window_size is not None:
            raise ValueError(
                "SnacDetokenizer needs a SNAC without local attention (attn_window_size null, as "
                "snac_24khz): windowed attention depends on where a window starts, so streamed "
                "audio could not equal the whole decode"
            )
        strides = [int(s) for s in model.vq_strides]
        if strides != [4, 2, 1]:
            raise ValueError(
                f"SnacDetokenizer needs vq_strides [4, 2, 1] (snac_24khz), got {strides}"
            )
        for name, value, least in (
            ("left_context_frames", left_context_frames, 0),
            ("lookahead_frames", lookahead_frames, 0),
            ("chunk_frames", chunk_frames, 1),
            ("first_chunk_frames", first_chunk_frames, 1),
        ):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.model = model.eval()
        self.noise = install_positional_noise(model)
        fold_weight_norm(model)
        self.left = left_context_frames
        self.right = lookahead_frames
        self.chunk = chunk_frames
        self.first_chunk = first_chunk_frames
        self.latent_per_frame = strides[0]  # 4 latent steps of 512 samples
        self.device = next(model.parameters()).device
        self.graphs = None  # engine.cuda_graphs.CallableGraphs, once enable_cuda_graphs ran

    @property
    def samples_per_frame(self) -> int:
        return int(self.model.hop_length) * self.latent_per_frame

    @property
    def sample_rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def first_audio_frames(self) -> int:
        """Frames a stream must have before its first (non-final) audio comes out."""
        return self.first_chunk + self.right

    def new_stream(self, seed: int = 0) -> SnacStream:
        """A fresh stream; `seed` picks its noise (only the low 32 bits matter)."""
        return SnacStream(seed=seed % 2**32)

    def push(self, stream: SnacStream, frames: list[list[int]]) -> None:
        """Append frames, each 7 codes `[l0, l1a, l1b, l2a, l2b, l2c, l2d]` in [0, codebook)."""
        if stream.finished:
            raise ValueError("cannot push frames into a SNAC stream after its final decode")
        if not frames:
            return
        codes = np.asarray(frames, dtype=np.int64)
        if codes.ndim != 2 or codes.shape[1] != 7:
            raise ValueError(f"SNAC frames must each hold 7 codes, got shape {codes.shape}")
        if codes.min() < 0 or codes.max() >= self.model.codebook_size:
            raise ValueError(
                f"SNAC codes must lie in [0, {self.model.codebook_size}), got {codes.min()}.."
                f"{codes.max()}; subtract the LLM's audio-token offsets before pushing"
            )
        stream.frames = np.concatenate([stream.frames, codes])

    def frames_ready(self, stream: SnacStream, final: bool) -> int:
        """Frames decode(…) would emit now: whole chunks with full lookahead, or, when final,
        everything left."""
        chunks = self._chunks(stream, final)
        return chunks[-1][1] - stream.emitted if chunks else 0

    def _chunks(self, stream: SnacStream, final: bool) -> list[tuple[int, int]]:
        """[start, end) of each chunk now emittable. Chunk lengths ramp from first_chunk_frames
        up to chunk_frames, each at most the audio already out: early chunks stay small while
        the listener's buffer is small, later ones amortise the window's context overhead."""
        chunks, start = [], stream.emitted
        while start < stream.total:
            size = self.first_chunk if start == 0 else min(self.chunk, max(self.first_chunk, start))
            end = start + size
            if end + self.right > stream.total:
                if not final:
                    break  # wait for the lookahead frames
                end = min(end, stream.total)  # the whole decode has no more right context either
            chunks.append((start, end))
            start = end
        return chunks

    def decode(self, streams: list[SnacStream], final: list[bool]) -> list[np.ndarray]:
        """Emit each stream's newly ready audio (float32 mono, possibly empty) and advance it.
        Work is cut into chunk-sized windows; windows of equal length share one decoder call."""
        if len(streams) != len(final):
            raise ValueError(f"got {len(streams)} streams but {len(final)} final flags")
        windows = [
            _Window(i, start, end, max(0, start - self.left), min(s.total, end + self.right))
            for i, (s, f) in enumerate(zip(streams, final, strict=True))
            for start, end in self._chunks(s, f)
        ]
        by_length: dict[int, list[_Window]] = {}
        for w in windows:
            by_length.setdefault(w.hi - w.lo, []).append(w)
        pieces: dict[_Window, np.ndarray] = {}
        for group in by_length.values():
            pieces.update(zip(group, self._decode_group(streams, group), strict=True))
        out = []
        for i, (stream, fin) in enumerate(zip(streams, final, strict=True)):
            mine = [w for w in windows if w.row == i]
            out.append(
                np.concatenate([pieces[w] for w in mine]) if mine else np.zeros(0, np.float32)
            )
            stream.emitted = mine[-1].end if mine else stream.emitted
            stream.finished = stream.finished or fin
            drop = stream.emitted - self.left - stream.base
            if drop > 0:
                stream.frames = stream.frames[drop:]
                stream.base += drop
        return out

    @torch.inference_mode()
    def _decode_group(self, streams: list[SnacStream], group: list[_Window]) -> list[np.ndarray]:
        """One SNAC.decode over windows of equal length; returns each window's emitted samples."""
        frames = np.stack([streams[w.row].window(w.lo, w.hi) for w in group])  # [B, T, 7]
        offsets = np.array([w.lo * self.latent_per_frame for w in group], dtype=np.int64)
        seeds = np.array([streams[w.row].seed for w in group], dtype=np.int64)
        n, length = len(group), frames.shape[1]
        bucket = self._graph_bucket(n, length)
        if bucket is not None:  # pad with copies of row 0 up to the captured batch size
            pad = [0] * (bucket - n)
            frames, offsets, seeds = (np.concatenate([a, a[pad]]) for a in (frames, offsets, seeds))
        inputs = [torch.from_numpy(a).to(self.device, non_blocking=True) for a in (frames, offsets, seeds)]
        if bucket is not None:
            audio = self.graphs.run(("snac", bucket, length), self._decode_codes, inputs)[:n]
        else:
            audio = self._decode_codes(*inputs)
        audio = audio.float().cpu().numpy()
        spf = self.samples_per_frame
        return [
            a[(w.start - w.lo) * spf : (w.end - w.lo) * spf]
            for a, w in zip(audio, group, strict=True)
        ]

    def _decode_codes(self, frames: torch.Tensor, offsets: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
        """frames [B, T, 7] → audio [B, T * samples_per_frame]; traceable into a CUDA graph."""
        b = frames.shape[0]
        levels = [frames[:, :, 0], frames[:, :, 1:3], frames[:, :, 3:7]]  # [B,T] [B,T,2] [B,T,4]
        levels = [c.reshape(b, -1) for c in levels]  # [B, T] [B, 2T] [B, 4T]
        self.noise.latent_offset, self.noise.seed = offsets, seeds
        try:
            return self.model.decode(levels)[:, 0]
        finally:
            self.noise.latent_offset = self.noise.seed = None

    # --- CUDA graphs ------------------------------------------------------------------------------
    # The window lengths of the chunk schedule (1, 1, 2, 4, 4 … frames with their context) at a
    # few batch sizes are captured; other shapes (final flushes) run eagerly.
    GRAPH_BATCHES = (1, 2, 4, 8, 16, 32, 64)

    def enable_cuda_graphs(self, graphs) -> None:
        """Capture the steady-state window shapes with the engine's CallableGraphs."""
        self.graphs = graphs
        lengths = sorted({hi - lo for lo, hi in self._schedule_windows(12)})
        with torch.inference_mode():
            for batch in self.GRAPH_BATCHES:
                for length in lengths:
                    inputs = [
                        torch.zeros(batch, length, 7, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                        torch.zeros(batch, dtype=torch.int64, device=self.device),
                    ]
                    graphs.capture(("snac", batch, length), self._decode_codes, inputs)

    def _schedule_windows(self, n_chunks: int) -> list[tuple[int, int]]:
        """(lo, hi) of the first n_chunks non-final windows of a long stream."""
        stream = SnacStream(frames=np.zeros((10_000, 7), dtype=np.int64))
        return [
            (max(0, start - self.left), end + self.right)
            for start, end in self._chunks(stream, final=False)[:n_chunks]
        ]

    def _graph_bucket(self, n: int, length: int) -> int | None:
        if self.graphs is None:
            return None
        bucket = next((b for b in self.GRAPH_BATCHES if b >= n), None)
        return bucket if bucket is not None and ("snac", bucket, length) in self.graphs else None
