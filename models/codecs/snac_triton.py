"""SNAC's residual units, its Snakes with the stateful convs after them, and its upsampling
steps with their noise, as hand-written Triton kernels (how CUDA graphs run them:
SnacDetokenizer.enable_cuda_graphs): what snac_streaming's StreamingResidualUnit, a Snake1d
step with the StreamingConv or StreamingUpsample after it, and a StreamingUpsample with the
StreamingNoise after it compute, in fewer passes over memory.

Why: in Orpheus' 512-request burst on an H200, SNAC took a third of each step's device time,
~56 µs a frame against a ~15-20 µs memory floor, and Inductor's kernels for the residual
units (the masked Snake joined to the kept inputs, the dilated taps with the next Snake, the
residual add around cuBLAS' pointwise conv) each moved their bytes at ~20-30 % of the copy
bandwidth. These kernels take a frame for 27.7 µs against Inductor's 38.3 (64 rows, calls of
4 frames, float32, an H100; the 512-request burst 3.6 % faster: docs/benchmark-history.md).
Three kernels:

- `_join`: a conv's joined line [its kept inputs, the masked Snake of the new ones], one sine
  a sample; for a residual unit also its skip path's tail for the next call. Before an
  upsampling step or the output conv it replaces the Snake's pass and the compiled
  concatenation's (which read and wrote the line again, at half the Snake's speed);
- `_unit_taps_mix`: for a tile of output channels and samples, the dilated 7-tap depthwise
  conv and the second Snake of each input channel's line (the taps' overlapping reads come
  from the cache), then the pointwise conv as a matrix product on tensor cores (TF32 where
  torch's float32 matmuls are, or float16), its bias and the delayed skip path added before
  the one store: the conv's output never goes to memory;
- `_upsample_noise`: after the transposed conv's GEMM (cuBLAS), for a tile of output
  channels and samples, the overlap-add of its product and its bias, the noise block's
  pointwise conv on tensor cores over the upsampled line made on the fly, and the positional
  noise (snac_noise's hash and Box-Muller, once a sample): y + noise · (W y) in one store,
  where Inductor's blocks wrote y, read it for cuBLAS' pointwise conv and read both again.

The tiled kernels' tile is tuned at their first call for each width and size class
(TAPS_MIX_CONFIGS, triton.autotune; outside graph capture, in the codec's warm-up).

Values: the steps' own formulas (snac.layers.snake, F.conv1d's cross-correlation, the
residual add, snac_streaming.upsample's overlap-add, snac_noise's positional noise), computed
in float32 whatever the storage dtype; they equal the torch ops to
float rounding (tests/models/test_snac_triton.py runs the kernels in Triton's interpreter on
the CPU; tests/gpu/test_gpu_engine.py in CUDA graphs). Imported only for CUDA graphs: CPU
installs have no Triton."""

from __future__ import annotations

import inspect
import os

import torch
import triton
import triton.language as tl

# A join program covers JOIN_BLOCK samples of one row's channel.
JOIN_BLOCK = 1024
# A join without a skip line (a Snake's before a conv) runs 8 warps: compiled with 4, ptxas
# spilled to local memory (4 bytes) where the residual units' join, at 4, does not.
SNAKE_JOIN_WARPS = 8


def _taps_mix_config(block_co: int, block_ci: int, block_t: int, warps: int) -> triton.Config:
    """A tile for _unit_taps_mix: [block_co output channels, block_t samples], block_ci input
    channels' taps a step, in one stage: triton.Config's own default is three (the taps and
    weights of the next steps loaded into shared memory while this one's product runs), which
    made the kernels ~30 % slower a frame on an H100 (37.2 against 27.7 µs at 64 rows ×
    4 frames, bench/snac_cost.py --triton)."""
    return triton.Config(
        {"BLOCK_CO": block_co, "BLOCK_CI": block_ci, "BLOCK_T": block_t},
        num_warps=warps,
        num_stages=1,
    )


# The tiles _unit_taps_mix is tuned over at its first call for each width and size class
# (triton.autotune): all compile for sm_90 without spilling registers (ptxas -v: 48-211
# registers a thread), the first being the one Triton's interpreter runs on the CPU. Software
# pipelining (two or three stages of the taps and weights in shared memory) was tried on the
# tiles of ≤ 150 registers: on an H100 the tuner chose a one-stage tile for every width and
# class, at 8 and at 64 rows (bench/snac_cost.py --triton, docs/benchmark-history.md), so
# every tile is one-stage.
TAPS_MIX_CONFIGS = [
    _taps_mix_config(64, 16, 64, 8),
    _taps_mix_config(64, 32, 32, 8),
    _taps_mix_config(64, 16, 32, 4),
    _taps_mix_config(64, 32, 64, 8),
    _taps_mix_config(32, 16, 64, 4),
    _taps_mix_config(128, 32, 64, 8),
]


def _fitting_tiles(configs, named_args, **kwargs):
    """The tiles no wider than the unit (tl.dot needs 16 rows or more)."""
    width = max(16, kwargs["C"])  # residual_unit passes C by name
    return [c for c in configs if c.kwargs["BLOCK_CO"] <= width] or configs[:1]


@triton.jit
def _snake(v, alpha, inv_alpha):
    """snac.layers.snake on float32 values: v + sin(alpha·v)² / (alpha + 1e-9)."""
    s = tl.sin(alpha * v)
    return v + inv_alpha * s * s


@triton.jit
def _join(
    x_ptr,  # [B, C, n] the step's input
    kept_ptr,  # [B, C, KEPT] the conv's kept inputs (masked Snake values)
    skip_state_ptr,  # [B, C, HALF] a residual unit's skip path's kept inputs
    start_ptr,  # [B] int64: absolute position of x's first sample
    end_ptr,  # [B] int64: the stream's end at this rate
    alpha_ptr,  # [C] the Snake's
    joined_ptr,  # [B, C, KEPT + n] out: [the kept inputs, the masked Snake of x]
    new_skip_ptr,  # [B, C, HALF] out: the skip line's last HALF
    C,
    n,
    KEPT: tl.constexpr,
    HALF: tl.constexpr,  # 0: no skip line (a conv after a Snake, not a residual unit)
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)  # b · C + c
    pid = tl.program_id(1)
    b = row // C
    c = row % C
    width = n + KEPT
    row64 = row.to(tl.int64)
    x_row = x_ptr + row64 * n
    p = pid * BLOCK + tl.arange(0, BLOCK)
    ok = p < width
    in_state = p < KEPT
    kept = tl.load(kept_ptr + row64 * KEPT + p, mask=ok & in_state, other=0.0)
    xi = p - KEPT
    v = tl.load(x_row + xi, mask=ok & (xi >= 0), other=0.0).to(tl.float32)
    pos = tl.load(start_ptr + b) + xi
    live = (pos >= 0) & (pos < tl.load(end_ptr + b))
    alpha = tl.load(alpha_ptr + c).to(tl.float32)
    fresh = tl.where(live, _snake(v, alpha, 1.0 / (alpha + 1e-9)), 0.0)
    joined = tl.where(in_state, kept.to(tl.float32), fresh)
    tl.store(joined_ptr + row64 * width + p, joined.to(joined_ptr.dtype.element_ty), mask=ok)
    # HALF is known at compile time: a kernel without a skip line has no branch here.
    if HALF > 0:  # noqa: SIM102
        if pid == 0:  # the skip line is [HALF kept, the n new]: its last HALF, for the next call
            q = tl.arange(0, BLOCK)
            at = n + q
            from_kept = at < HALF
            skip = tl.load(
                skip_state_ptr + row64 * HALF + at, mask=(q < HALF) & from_kept, other=0.0
            )
            new = tl.load(x_row + at - HALF, mask=(q < HALF) & (at >= HALF), other=0.0)
            tl.store(new_skip_ptr + row64 * HALF + q, tl.where(from_kept, skip, new), mask=q < HALF)


@triton.jit(do_not_specialize=["rows_class"])
def _unit_taps_mix(
    joined_ptr,  # [B, C, 2h + n] _join's
    x_ptr,  # [B, C, n] the unit's input (the skip path)
    skip_state_ptr,  # [B, C, h]
    tap_weight_ptr,  # [C, TAPS] the dilated depthwise conv
    tap_bias_ptr,  # [C]
    alpha_ptr,  # [C] the second Snake's
    mix_weight_ptr,  # [C, C] the pointwise conv
    mix_bias_ptr,  # [C]
    out_ptr,  # [B, C, n]
    n,
    rows_class,  # unread: part of the tuning's key (_rows_class)
    C: tl.constexpr,
    DILATION: tl.constexpr,
    TAPS: tl.constexpr,
    HAS_TAP_BIAS: tl.constexpr,
    HAS_MIX_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_CO: tl.constexpr,
    BLOCK_CI: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    CO_TILES: tl.constexpr = (C + BLOCK_CO - 1) // BLOCK_CO
    HALF: tl.constexpr = DILATION * (TAPS - 1) // 2
    pid = tl.program_id(0)  # b · CO_TILES + the output channels' tile
    b = (pid // CO_TILES).to(tl.int64)
    co = (pid % CO_TILES) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    width = n + 2 * HALF
    t_ok = t < n
    co_ok = co < C
    acc = tl.zeros([BLOCK_CO, BLOCK_T], dtype=tl.float32)
    for ci0 in range(0, C, BLOCK_CI):
        # The second Snake of the taps over joined, for BLOCK_CI input channels: the taps'
        # shifted reads overlap, so they come from the cache after the first.
        ci = ci0 + tl.arange(0, BLOCK_CI)
        ci_ok = ci < C
        line = joined_ptr + (b * C + ci[:, None]) * width + t[None, :]
        ok = ci_ok[:, None] & t_ok[None, :]
        h = tl.zeros([BLOCK_CI, BLOCK_T], dtype=tl.float32)
        if HAS_TAP_BIAS:
            h += tl.load(tap_bias_ptr + ci, mask=ci_ok, other=0.0).to(tl.float32)[:, None]
        for tap in tl.static_range(TAPS):
            w = tl.load(tap_weight_ptr + ci * TAPS + tap, mask=ci_ok, other=0.0).to(tl.float32)
            h += w[:, None] * tl.load(line + tap * DILATION, mask=ok, other=0.0).to(tl.float32)
        alpha = tl.load(alpha_ptr + ci, mask=ci_ok, other=1.0).to(tl.float32)[:, None]
        h = _snake(h, alpha, 1.0 / (alpha + 1e-9))
        mix = tl.load(
            mix_weight_ptr + co[:, None] * C + ci[None, :],
            mask=co_ok[:, None] & ci_ok[None, :],
            other=0.0,
        )
        acc += tl.dot(mix, h.to(mix.dtype), input_precision=PRECISION)
    if HAS_MIX_BIAS:
        acc += tl.load(mix_bias_ptr + co, mask=co_ok, other=0.0).to(tl.float32)[:, None]
    rows = b * C + co[:, None]
    ok = co_ok[:, None] & t_ok[None, :]
    from_kept = (t < HALF)[None, :]  # the skip line [h kept, x] read at t: delayed by h
    kept = tl.load(skip_state_ptr + rows * HALF + t[None, :], mask=ok & from_kept, other=0.0)
    fresh = tl.load(x_ptr + rows * n + t[None, :] - HALF, mask=ok & ~from_kept, other=0.0)
    y = acc + tl.where(from_kept, kept, fresh).to(tl.float32)
    tl.store(out_ptr + rows * n + t[None, :], y.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _hash32(x):
    """snac_noise._hash32 on uint32 values: its int64 products masked to 32 bits are these
    products' wrap-around."""
    x = ((x >> 16) ^ x) * 0x45D9F3B
    x = ((x >> 16) ^ x) * 0x45D9F3B
    return (x >> 16) ^ x


@triton.jit
def _positional_normal(seed, salt, pos):
    """snac_noise.positional_normal: standard-normal noise at absolute positions `pos` (int64)
    of the stream with this `seed` (int64), `salt` telling the noise blocks apart."""
    stream = _hash32(_hash32(seed.to(tl.uint32)) + salt)
    key = _hash32(stream ^ pos.to(tl.uint32))
    u1 = ((_hash32(key ^ 0x68E31DA4) >> 8).to(tl.float32) + 0.5) * 5.9604644775390625e-08
    u2 = (_hash32(key ^ 0x1B56C4E9) >> 8).to(tl.float32) * 5.9604644775390625e-08
    return tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)  # Box-Muller


@triton.jit
def _upsampled(
    z_ptr, bias_ptr, late, early, c, c_ok, t_ok, S: tl.constexpr, HAS_BIAS: tl.constexpr
):
    """The transposed conv's output [channels c, samples] in float32 from its product z:
    the overlap-add of the `late` and `early` halves (_upsample_noise's offsets) and the bias."""
    ok = c_ok[:, None] & t_ok[None, :]
    at = c[:, None] * 2 * S
    y = tl.load(z_ptr + late[None, :] + at, mask=ok, other=0.0).to(tl.float32)
    y += tl.load(z_ptr + early[None, :] + at, mask=ok, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y += tl.load(bias_ptr + c, mask=c_ok, other=0.0).to(tl.float32)[:, None]
    return y


@triton.jit(do_not_specialize=["rows_class"])
def _upsample_noise(
    z_ptr,  # [B, n + 1, C, 2S] the transposed conv's product: each input step's 2S outputs
    bias_ptr,  # [C] the transposed conv's
    noise_weight_ptr,  # [C, C] the noise block's pointwise conv
    seed_ptr,  # [B] int64: each row's noise seed
    start_ptr,  # [B] int64: absolute position of each row's first output sample
    out_ptr,  # [B, C, n·S]
    n,
    rows_class,  # unread: part of the tuning's key (_rows_class)
    SALT: tl.constexpr,
    C: tl.constexpr,
    S: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_CO: tl.constexpr,
    BLOCK_CI: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    CO_TILES: tl.constexpr = (C + BLOCK_CO - 1) // BLOCK_CO
    pid = tl.program_id(0)  # b · CO_TILES + the output channels' tile
    b = (pid // CO_TILES).to(tl.int64)
    co = (pid % CO_TILES) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    length = n * S
    t_ok = t < length
    co_ok = co < C
    # Output sample t (of input step t // S) sums the next step's first half and its own
    # step's second half of the product: z[b, t // S + 1, c, t % S] + z[b, t // S, c, S + t % S].
    step = (b * (n + 1) + t // S) * C
    late = (step + C) * 2 * S + t % S
    early = step * 2 * S + S + t % S
    acc = tl.zeros([BLOCK_CO, BLOCK_T], dtype=tl.float32)
    for ci0 in range(0, C, BLOCK_CI):
        # The upsampled line of BLOCK_CI channels, then their share of the noise block's
        # pointwise conv: the line is never written to memory.
        ci = ci0 + tl.arange(0, BLOCK_CI)
        ci_ok = ci < C
        y = _upsampled(z_ptr, bias_ptr, late, early, ci, ci_ok, t_ok, S, HAS_BIAS)
        w = tl.load(
            noise_weight_ptr + co[:, None] * C + ci[None, :],
            mask=co_ok[:, None] & ci_ok[None, :],
            other=0.0,
        )
        acc += tl.dot(w, y.to(w.dtype), input_precision=PRECISION)
    y = _upsampled(z_ptr, bias_ptr, late, early, co, co_ok, t_ok, S, HAS_BIAS)
    noise = _positional_normal(tl.load(seed_ptr + b), SALT, tl.load(start_ptr + b) + t)
    out = y + noise[None, :] * acc
    rows = b * C + co[:, None]
    ok = co_ok[:, None] & t_ok[None, :]
    tl.store(out_ptr + rows * length + t[None, :], out.to(out_ptr.dtype.element_ty), mask=ok)


# Calls of up to this many rows are tuned apart from larger ones: a server at its listeners'
# capacity decodes a few rows a call (5-7 for Orpheus at 300 listeners), a burst of requests
# tens, and the tile that is fastest for one need not be for the other.
SMALL_CALL_ROWS = 8


def _rows_class(rows: int) -> int:
    """The tuning's size class of a call of `rows` rows: 0 small, 1 large."""
    return 0 if rows <= SMALL_CALL_ROWS else 1


def _tuned(kernel, key: list[str]):
    """`kernel` tuned over TAPS_MIX_CONFIGS once a `key` (a width and size class, ...), at
    its first call of each: SnacDetokenizer.enable_cuda_graphs captures its largest calls
    first, so each class is tuned at its largest (64 rows; 8). Where this Triton's autotune
    can, the choice is kept in its cache, so a later start with the same Triton on a GPU of
    the same architecture (an H100's choice serves an H200) skips the timing."""
    options = {}
    if "cache_results" in inspect.signature(triton.autotune).parameters:
        options["cache_results"] = True
    return triton.autotune(
        configs=TAPS_MIX_CONFIGS,
        key=key,
        prune_configs_by={"early_config_prune": _fitting_tiles},
        **options,
    )(kernel)


_TUNED = {
    _unit_taps_mix: _tuned(_unit_taps_mix, ["C", "rows_class"]),
    _upsample_noise: _tuned(_upsample_noise, ["C", "S", "rows_class"]),
}


def _tiled(kernel):
    """`kernel` tuned and no fixed tile; in Triton's interpreter (no device to time tiles
    on), the plain kernel and the first tile (tests replace this to run each tile)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        config = TAPS_MIX_CONFIGS[0]
        return kernel, {**config.kwargs, "num_warps": config.num_warps}
    return _TUNED[kernel], {}


def _matmul_precision(dtype: torch.dtype) -> str:
    """The pointwise conv's arithmetic: float32 in TF32 where torch's float32 matmuls run so
    (device_util.gemms_in_conv_precision sets it as the convs'), else IEEE; half types as they are."""
    if dtype != torch.float32:
        return "ieee"
    return "tf32" if torch.backends.cuda.matmul.fp32_precision == "tf32" else "ieee"


def residual_unit(
    x: torch.Tensor,
    skip_state: torch.Tensor,
    conv_state: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    snake_in: torch.nn.Module,
    conv: torch.nn.Conv1d,
    snake_out: torch.nn.Module,
    pointwise: torch.nn.Conv1d,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """StreamingResidualUnit.forward in two kernels: x [B, C, n] from absolute position
    `start` [B], its kept skip [B, C, h] and conv inputs [B, C, 2h] → (the output from
    start - h, the new skip state, the new conv state)."""
    b, c, n = x.shape
    taps, dilation = conv.kernel_size[0], conv.dilation[0]
    half = dilation * (taps - 1) // 2
    x = x.contiguous()
    skip_state, conv_state = skip_state.contiguous(), conv_state.contiguous()
    joined = x.new_empty(b, c, 2 * half + n)
    new_skip = torch.empty_like(skip_state)
    _join[(b * c, triton.cdiv(2 * half + n, JOIN_BLOCK))](
        x,
        conv_state,
        skip_state,
        start,
        end,
        snake_in.alpha,
        joined,
        new_skip,
        c,
        n,
        KEPT=2 * half,
        HALF=half,
        BLOCK=JOIN_BLOCK,
    )
    out = torch.empty_like(x)
    kernel, tile = _tiled(_unit_taps_mix)
    launch = kernel[
        lambda meta: (b * triton.cdiv(c, meta["BLOCK_CO"]), triton.cdiv(n, meta["BLOCK_T"]))
    ]
    launch(
        joined,
        x,
        skip_state,
        conv.weight,
        conv.bias if conv.bias is not None else x,  # unread without a bias
        snake_out.alpha,
        pointwise.weight,
        pointwise.bias if pointwise.bias is not None else x,
        out,
        n,
        _rows_class(b),
        C=c,
        DILATION=dilation,
        TAPS=taps,
        HAS_TAP_BIAS=conv.bias is not None,
        HAS_MIX_BIAS=pointwise.bias is not None,
        PRECISION=_matmul_precision(x.dtype),
        **tile,
    )
    return out, new_skip, joined[..., -2 * half :]


def snake_join(
    x: torch.Tensor,
    kept: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    alpha: torch.Tensor,
) -> torch.Tensor:
    """A Snake and the stateful conv after it, joined: [kept, the masked Snake of x]
    [B, C, k + n] in one pass, for x [B, C, n] from absolute position `start` [B] and the
    conv's kept inputs `kept` [B, C, k] (StreamingConv's and StreamingUpsample's input, which
    the torch ops make in two: the Snake, then the mask and the concatenation). The next
    call's kept inputs are its last k."""
    b, c, n = x.shape
    k = kept.shape[-1]
    x, kept = x.contiguous(), kept.contiguous()
    joined = x.new_empty(b, c, k + n)
    _join[(b * c, triton.cdiv(k + n, JOIN_BLOCK))](
        x,
        kept,
        x,  # no skip line: unread
        start,
        end,
        alpha,
        joined,
        joined,  # no skip line: unwritten
        c,
        n,
        KEPT=k,
        HALF=0,
        BLOCK=JOIN_BLOCK,
        num_warps=SNAKE_JOIN_WARPS,
    )
    return joined


def upsample_noise(
    z: torch.Tensor,
    bias: torch.Tensor | None,
    noise_weight: torch.Tensor,
    salt: int,
    seed: torch.Tensor,
    start: torch.Tensor,
) -> torch.Tensor:
    """A transposed conv (kernel 2·stride) from its GEMM's product z [B, n + 1, C, 2·stride]
    (snac_streaming.transposed_product) and its `bias`, with the noise block after it
    (y + N(0, 1) · noise_weight·y, the noise a function of (seed [B], salt, position), the
    output's first sample at `start` [B]), in one kernel: the overlap-add, the bias, the
    noise's pointwise conv and the add, where Inductor's blocks wrote the upsampled line,
    read it for cuBLAS' pointwise conv, and read both again for the add. → [B, C, n·stride]."""
    b, steps, c, two_s = z.shape
    s = two_s // 2
    n = steps - 1
    out = z.new_empty(b, c, n * s)
    kernel, tile = _tiled(_upsample_noise)
    launch = kernel[
        lambda meta: (b * triton.cdiv(c, meta["BLOCK_CO"]), triton.cdiv(n * s, meta["BLOCK_T"]))
    ]
    launch(
        z,
        bias if bias is not None else z,  # unread without a bias
        noise_weight,
        seed,
        start,
        out,
        n,
        _rows_class(b),
        SALT=salt,
        C=c,
        S=s,
        HAS_BIAS=bias is not None,
        PRECISION=_matmul_precision(z.dtype),
        **tile,
    )
    return out
