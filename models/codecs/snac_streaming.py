"""SNAC's decoder run incrementally: each conv keeps the inputs its next call needs, so every
latent step is decoded once, and streamed audio equals the whole decode exactly.

Why: decoding each chunk again in a window with L + R context frames (3 + 2) decodes 13
frames to emit 8 and 9 to emit 4, and leaves a seam error where a window's zero padding stands in for real
activations. Carried state decodes each frame once, exactly; the price is latency: a sample
comes out once every input it depends on is in (the decoder's whole right half of its
receptive field, `delay_samples`, ~2.3 frames). models/codecs/snac.py plans the calls.

How: SNAC's decoder is a chain of symmetric convs (k7 with dilations 1/3/9, and the latent and
output convs), transposed convs (k = 2·stride), pointwise convs, Snake activations, positional
noise and residual adds. Each call feeds the next latent steps of every row; a conv of
half-width h runs without padding over [its last 2h inputs, the new ones] and so emits as many
samples as it got, h later; a transposed conv keeps its last input step; a residual unit delays
its skip path by its conv's h. Every tensor's first sample has an absolute position per row, so
the whole decode's zero padding is reproduced by zeroing a conv's inputs at positions before
0 or past the stream's end, and the noise is drawn at its absolute positions
(models/codecs/snac_noise.py). Shapes depend only on the batch and the call's length, so a
call can be captured in a CUDA graph, with the state tensors as its inputs and outputs.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from snac import SNAC
from snac.layers import DecoderBlock, ResidualUnit, Snake1d
from torch import nn

from models.codecs.snac_noise import PositionalNoise, install_positional_noise, positional_normal

log = logging.getLogger(__name__)

# A stream's end while it is still open, in latent steps: past any real stream, and times the
# decoder's upsampling (512) still an int64.
NO_END = 2**40


@dataclass
class _Rows:
    """Per-row facts of one call, threaded through the chain."""

    start: torch.Tensor  # [B] int64: absolute position of the current tensor's first sample
    end: torch.Tensor  # [B] int64: the stream's length at the current rate (NO_END: open)
    seed: torch.Tensor  # [B] int64: the noise seed


class StreamingSnacDecoder:
    """Latent steps in, audio out, with per-row state. Use `new_state` for a fresh stream's
    state; `decode` advances a batch of rows by the same number of latent steps.

    `model` must have its noise made positional (install_positional_noise; load_snac does it)
    and may have its weight norm folded; its weights are shared, not copied."""

    def __init__(self, model: SNAC):
        if model.attn_window_size is not None:
            raise ValueError("streaming SNAC needs a decoder without local attention (snac_24khz)")
        install_positional_noise(model)
        self.model = model
        # The decoder as one flat chain: upsampling blocks opened into their layers, residual
        # units kept whole (each is a step with its own state). Its state's layout, its delay
        # and every call walk this one list.
        self.steps = _flatten(model.decoder.model)
        # The steps with state or position inputs, each stepped by a module of its own (the
        # weights shared): what --compile-codec compiles (repeated_blocks). Eager, a noise
        # step's hash and Box-Muller are ~two dozen elementwise kernels; compiled, one.
        self.residual_steps = {
            unit: StreamingResidualUnit(unit)
            for unit in self.steps
            if isinstance(unit, ResidualUnit)
        }
        self.noise_steps = {
            noise: StreamingNoise(noise)
            for noise in self.steps
            if isinstance(noise, PositionalNoise)
        }
        self.conv_steps = {  # the latent's depthwise conv and the output conv
            conv: StreamingConv(conv)
            for conv in self.steps
            if isinstance(conv, nn.Conv1d) and conv.kernel_size[0] > 1
        }
        self.upsample_steps = {
            conv: StreamingUpsample(conv)
            for conv in self.steps
            if isinstance(conv, nn.ConvTranspose1d)
        }
        # With the Triton kernels a Snake and the stateful step after it run as one: the
        # symmetric conv after a Snake (the output conv) on the line a kernel joined
        # (snake_join), with a module running the conv on that line alone ...
        self.joined_convs = {
            step: (before, _OverJoined(step))
            for before, step in itertools.pairwise(self.steps)
            if isinstance(before, Snake1d) and step in self.conv_steps
        }
        # ... and an upsampling step between a Snake and a noise step with the noise, its
        # overlap-add and the noise one kernel after its GEMM (upsample_noise).
        self.noised_upsamples = {
            step: (before, after)
            for before, step, after in zip(self.steps, self.steps[1:], self.steps[2:], strict=False)
            if isinstance(before, Snake1d)
            and step in self.upsample_steps
            and isinstance(after, PositionalNoise)
            and after.linear.bias is None
        }
        # The Triton kernels' module (models/codecs/snac_triton.py) once use_triton_kernels
        # ran: the residual units, the Snakes with the convs after them and the upsamplings
        # with their noise then run them.
        self.kernels = None
        self._runs = self._runners()
        self.samples_per_latent = int(model.hop_length)
        self.state_shapes = [shape for step in self.steps for shape in _state_shapes(step)]
        rows = _Rows(torch.zeros(1, dtype=torch.int64), torch.full((1,), NO_END), torch.zeros(1))
        for step in self.steps:
            rows = _advance(step, rows)
        self.delay_samples = -int(rows.start[0])  # where a call's output starts, latent 0 in

    # --- the state ------------------------------------------------------------------------------
    # A row's state is one flat vector (every conv's kept inputs, in the decoder's order), so a
    # batch's is one [B, state_size] tensor: one copy to gather the rows of a call, one to keep
    # them, however many convs.
    @property
    def state_size(self) -> int:
        return sum(c * n for c, n in self.state_shapes)

    def new_state(self, batch: int, device=None, dtype=torch.float32) -> torch.Tensor:
        """Zeros [batch, state_size]: what the whole decode's left padding holds."""
        return torch.zeros(batch, self.state_size, device=device, dtype=dtype)

    def _unpack(self, state: torch.Tensor) -> list[torch.Tensor]:
        """[B, state_size] → each conv's [B, C, n] (views)."""
        parts, offset = [], 0
        for c, n in self.state_shapes:
            parts.append(state[:, offset : offset + c * n].view(-1, c, n))
            offset += c * n
        return parts

    # --- a call ---------------------------------------------------------------------------------
    def decode_frames(
        self,
        frames: torch.Tensor,
        state: torch.Tensor,
        position: torch.Tensor,
        end: torch.Tensor,
        seed: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`decode` from codes: frames [B, n, 7] in SNAC order `[l0, l1a, l1b, l2a, l2b, l2c,
        l2d]` are each row's next n frames (4·n latent steps)."""
        b = frames.shape[0]
        levels = [frames[:, :, 0], frames[:, :, 1:3], frames[:, :, 3:7]]
        latent = self.model.quantizer.from_codes([c.reshape(b, -1) for c in levels])
        return self.decode(latent, state, position, end, seed)

    def decode(
        self,
        latent: torch.Tensor,
        state: torch.Tensor,
        position: torch.Tensor,
        end: torch.Tensor,
        seed: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """latent [B, C, n]: each row's next n latent steps, which start at latent step
        `position` [B] of its stream; `end` [B]: the stream's length in latent steps once
        known (NO_END before); seed [B]: its noise seed. Returns audio [B, n * hop] for
        output positions position·hop - delay_samples onwards (those before 0 or past the
        end are not audio: the caller drops them) and the new state [B, state_size]."""
        rows = _Rows(position, end, seed)
        new_state: list[torch.Tensor] = []
        queue = iter(self._unpack(state))
        x = latent
        for step, run in zip(self.steps, self._runs, strict=True):
            x = run(x, rows, queue, new_state)
            rows = _advance(step, rows)
        packed = torch.cat([part.reshape(part.shape[0], -1) for part in new_state], dim=1)
        return x[:, 0], packed

    def use_triton_kernels(self) -> None:
        """Run the residual units, each Snake with the stateful conv after it, and each
        upsampling step with its noise step on hand-written Triton kernels
        (models/codecs/snac_triton.py) rather than as torch ops or compiled blocks: those
        steps leave repeated_blocks, but for the output conv's, which runs on the line its
        Snake's kernel joined. Needs Triton (CUDA, or its interpreter); where
        the kernels cannot load (a CUDA install of torch without Triton, or a Triton too old
        for them) the steps stay torch ops, with a warning."""
        try:
            from models.codecs import snac_triton
        except Exception as exc:  # any failure to load them leaves the torch ops serving
            log.warning(
                "SNAC's residual units run as torch ops, slower: its Triton kernels did not "
                "load (%s: %s); install the Triton your torch was built with for them",
                type(exc).__name__,
                exc,
            )
            return
        self.kernels = snac_triton
        self._runs = self._runners()

    def _runners(self) -> list:
        """Each step's runner (_runner). With the Triton kernels a Snake before a stateful
        conv passes its input on, and the conv's runner joins it (snake_join); so does a
        noise step after an upsampling, whose runner adds the noise (upsample_noise)."""
        if self.kernels is None:
            return [self._runner(step) for step in self.steps]
        fused = {snake for snake, _ in self.joined_convs.values()}
        fused.update(m for pair in self.noised_upsamples.values() for m in pair)
        return [_passing if step in fused else self._runner(step) for step in self.steps]

    def _runner(self, step: nn.Module):
        """How a call runs `step` on x (its first sample at `rows.start`), taking its kept
        inputs from `queue` and putting what it keeps now in `new_state`: chosen once a step.
        Where its output starts is _advance's."""
        kernels = self.kernels
        if kernels is not None and step in self.noised_upsamples:
            snake, noise = self.noised_upsamples[step]
            return _joining(kernels, snake, _noising(kernels, step, noise))
        if kernels is not None and step in self.joined_convs:
            snake, over_joined = self.joined_convs[step]
            return _joining(kernels, snake, lambda joined, rows: over_joined(joined))
        if isinstance(step, nn.Conv1d) and step.kernel_size[0] > 1:
            return _keeping(self.conv_steps[step])
        if isinstance(step, nn.ConvTranspose1d):
            return _keeping(self.upsample_steps[step])
        if isinstance(step, ResidualUnit):
            unit = self.residual_steps[step]
            if kernels is not None:
                unit = _on_kernels(unit, kernels)

            def residual(x, rows: _Rows, queue, new_state) -> torch.Tensor:
                y, skip_state, conv_state = unit(x, next(queue), next(queue), rows.start, rows.end)
                new_state += [skip_state, conv_state]
                return y

            return residual
        if isinstance(step, PositionalNoise):
            noise = self.noise_steps[step]
            return lambda x, rows, queue, new_state: noise(x, rows.seed, rows.start)
        # A pointwise conv, Snake1d, Tanh (_flatten admits nothing else): no state, no position.
        return lambda x, rows, queue, new_state: step(x)

    def repeated_blocks(self) -> list[nn.Module]:
        """The chain's two symmetric convs, the upsampling and noise steps (one each per
        upsampling block), then the residual units' steps (three per block): what
        --compile-codec compiles (cuda_graphs.compile_regions; residual steps of one width and
        dilation share a program, the others have one each). With the Triton kernels
        (use_triton_kernels) only the convs that no kernel covers: the input conv, and the
        output conv on the line its Snake's join kernel made."""
        if self.kernels is None:
            return [
                *self.conv_steps.values(),
                *self.upsample_steps.values(),
                *self.noise_steps.values(),
                *self.residual_steps.values(),
            ]
        noised = {noise for _, noise in self.noised_upsamples.values()}
        return [
            *(block for conv, block in self.conv_steps.items() if conv not in self.joined_convs),
            *(over_joined for _, over_joined in self.joined_convs.values()),
            *(b for up, b in self.upsample_steps.items() if up not in self.noised_upsamples),
            *(block for noise, block in self.noise_steps.items() if noise not in noised),
        ]


# What a step of the chain can be (_runner's cases).
_STEPS = (nn.Conv1d, nn.ConvTranspose1d, ResidualUnit, PositionalNoise, Snake1d, nn.Tanh)


def _flatten(modules) -> list[nn.Module]:
    """The decoder's layers in order, upsampling blocks opened; refuses what a step cannot
    run."""
    steps: list[nn.Module] = []
    for module in modules:
        if isinstance(module, DecoderBlock):
            steps += _flatten(module.block)
        elif isinstance(module, nn.Sequential):
            steps += _flatten(module)
        elif isinstance(module, nn.ConvTranspose1d) and (
            module.groups != 1 or module.kernel_size[0] != 2 * module.stride[0]
        ):
            raise ValueError(
                f"streaming SNAC needs transposed convs of kernel 2·stride, got {module}"
            )
        elif isinstance(module, _STEPS):
            steps.append(module)
        else:
            raise TypeError(f"streaming SNAC cannot run a {type(module).__name__}")
    return steps


def _state_shapes(step: nn.Module) -> list[tuple[int, int]]:
    """(channels, samples) of each tensor a step keeps between calls, in the order it takes
    them: a conv its last 2h inputs, a transposed conv its last input step, a residual unit
    its skip path's last h and its conv's last 2h."""
    if isinstance(step, nn.Conv1d) and step.kernel_size[0] > 1:
        return [(step.in_channels, 2 * _half_width(step))]
    if isinstance(step, nn.ConvTranspose1d):
        return [(step.in_channels, 1)]
    if isinstance(step, ResidualUnit):
        conv = step.block[1]
        return [(conv.in_channels, _half_width(conv)), (conv.in_channels, 2 * _half_width(conv))]
    return []


def _advance(step: nn.Module, rows: _Rows) -> _Rows:
    """Where a step's output starts (and the stream's end, at its rate), given its input's."""
    if isinstance(step, nn.Conv1d) and step.kernel_size[0] > 1:
        return _Rows(rows.start - _half_width(step), rows.end, rows.seed)
    if isinstance(step, nn.ConvTranspose1d):
        s = step.stride[0]
        return _Rows(rows.start * s - step.padding[0], rows.end * s, rows.seed)
    if isinstance(step, ResidualUnit):
        return _Rows(rows.start - _half_width(step.block[1]), rows.end, rows.seed)
    return rows


def _keeping(stepper: nn.Module):
    """A runner for a step that keeps one tensor of inputs between calls (a symmetric conv,
    a transposed conv): stepper(x, kept, start, end) -> (y, new kept)."""

    def run(x, rows: _Rows, queue, new_state) -> torch.Tensor:
        y, kept = stepper(x, next(queue), rows.start, rows.end)
        new_state.append(kept)
        return y

    return run


def _passing(x, rows: _Rows, queue, new_state) -> torch.Tensor:
    """A step whose work the next step's runner does (a Snake the conv after it joins)."""
    return x


def _joining(kernels, snake: Snake1d, then):
    """A runner for a Snake and the stateful step after it on the Triton kernels: one kernel
    makes the step's joined line [its kept inputs, the masked Snake of x]
    (snac_triton.snake_join), the line's last inputs are kept as the torch ops keep them, and
    `then(joined, rows)` runs the step on the line."""

    def run(x, rows: _Rows, queue, new_state) -> torch.Tensor:
        kept = next(queue)
        joined = kernels.snake_join(x, kept, rows.start, rows.end, snake.alpha)
        new_state.append(joined[..., joined.shape[-1] - kept.shape[-1] :])
        return then(joined, rows)

    return run


def _noising(kernels, upsample: nn.ConvTranspose1d, noise: PositionalNoise):
    """An upsampling step and the noise step after it on a joined line: the transposed conv's
    GEMM, then its overlap-add and the noise in one kernel (snac_triton.upsample_noise), the
    noise drawn at the upsampled samples' positions."""

    def then(joined: torch.Tensor, rows: _Rows) -> torch.Tensor:
        start = _advance(upsample, rows).start
        z = transposed_product(joined, upsample)
        weight = noise.linear.weight[:, :, 0]
        return kernels.upsample_noise(z, upsample.bias, weight, noise.salt, rows.seed, start)

    return then


class _OverJoined(nn.Module):
    """A symmetric conv on its joined line [kept inputs, the masked new ones], as
    StreamingConv runs it after joining: what --compile-codec compiles where a Triton kernel
    joined the line. Shares the conv (weights)."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        self.conv = conv

    def forward(self, joined: torch.Tensor) -> torch.Tensor:
        return symmetric_conv(joined, self.conv)


class StreamingResidualUnit(nn.Module):
    """A ResidualUnit (Snake, a dilated k7 conv, Snake, a pointwise conv; plus the input)
    stepped with its state: the conv keeps its last 2h inputs, and the skip path its last h,
    so the two sum in line. Shares the unit's modules (weights)."""

    def __init__(self, unit: ResidualUnit):
        super().__init__()
        self.snake_in, self.conv, self.snake_out, self.pointwise = unit.block
        self.reach = _half_width(self.conv)

    def forward(self, x, skip_state, conv_state, start, end):
        """x [B, C, n] from absolute position `start` [B] → (output from start - h, the
        new skip state, the new conv state)."""
        h = self.reach
        skip, new_skip = _delayed(x, skip_state, h)
        joined = torch.cat([conv_state, _masked(self.snake_in(x), start, end)], dim=-1)
        conv = self.conv
        y = symmetric_conv(joined, conv)
        y = pointwise(self.snake_out(y), self.pointwise)
        return skip + y, new_skip, joined[..., -2 * h :]


def _on_kernels(unit: StreamingResidualUnit, kernels):
    """`unit`'s forward as the Triton kernels' module `kernels` runs it, on its layers'
    weights."""
    layers = unit.snake_in, unit.conv, unit.snake_out, unit.pointwise

    def forward(x, skip_state, conv_state, start, end):
        return kernels.residual_unit(x, skip_state, conv_state, start, end, *layers)

    return forward


class StreamingConv(nn.Module):
    """A symmetric conv of half-width h stepped with its state: its window over [the last 2h
    inputs, the new ones] without padding, so its output starts h before the new inputs. What
    --compile-codec compiles: the input's mask and the concatenation with the conv (as shifted
    multiply-adds, `conv_taps`). Shares the conv (weights)."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        self.conv = conv
        self.reach = _half_width(conv)

    def forward(self, x, kept, start, end) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, C, n] from absolute position `start` [B], `kept` [B, C, 2h] → (the output,
        the new kept inputs)."""
        joined = torch.cat([kept, _masked(x, start, end)], dim=-1)
        conv = self.conv
        y = symmetric_conv(joined, conv)
        return y, joined[..., -2 * self.reach :]


class StreamingUpsample(nn.Module):
    """A transposed conv (k = 2·stride) stepped with its state: an output sample sums two
    input steps, so the last input step is kept, and the new ones' outputs whose two inputs
    are both in come out (`upsample`). What --compile-codec compiles: the input's mask, the
    kept step's concatenation and the overlap-add around the GEMM. Shares the conv (weights)."""

    def __init__(self, conv: nn.ConvTranspose1d):
        super().__init__()
        self.conv = conv

    def forward(self, x, kept, start, end) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, C, n] from absolute position `start` [B], `kept` [B, C, 1] → (the output,
        the new kept step)."""
        joined = torch.cat([kept, _masked(x, start, end)], dim=-1)
        return upsample(joined, self.conv), joined[..., -1:]


class StreamingNoise(nn.Module):
    """A PositionalNoise step (x + N(0, 1) · linear(x), the noise a function of each sample's
    absolute position) with its rows' seeds and positions passed in: what --compile-codec
    compiles, the hash, the Box-Muller transform and the add fused. Shares the block's
    linear (weights)."""

    def __init__(self, noise: PositionalNoise):
        super().__init__()
        self.linear = noise.linear
        self.salt = noise.salt

    def forward(self, x: torch.Tensor, seed: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """x [B, C, n], its first sample at absolute position `start` [B]; seed [B]."""
        noise = positional_normal(seed, self.salt, start, x.shape[-1])
        return x + noise[:, None, :].to(x.dtype) * pointwise(x, self.linear)


def _delayed(x: torch.Tensor, kept: torch.Tensor, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [B, C, n] delayed by h samples, with `kept` [B, C, h] (the last call's last h) in
    front: (the n samples that come out now, the last h to keep). Where n ≥ h the output
    is a concatenation read once by the residual add and the kept part a slice of x: no
    [B, C, n + h] line is written whole (compiled, that was a kernel of its own a unit)."""
    n = x.shape[-1]
    if n >= h:
        return torch.cat([kept, x[..., : n - h]], dim=-1), x[..., n - h :]
    line = torch.cat([kept, x], dim=-1)
    return line[..., :n], line[..., -h:]


def upsample(joined: torch.Tensor, conv: nn.ConvTranspose1d) -> torch.Tensor:
    """A transposed conv of kernel 2·s and stride s over `joined` [B, C, n + 1] (the kept
    step, then the n new ones), as one GEMM and an overlap-add: the n new steps' outputs
    [B, C_out, n·s], each of which sums two input steps.

    Why not F.conv_transpose1d: cuDNN runs it as a "dgrad" convolution whose kernels took 0.8-
    1.5 ms a call for the 8× blocks beside Orpheus' decode steps on an H200 (a 1.5-ms kernel on
    every SM also holds the LLM's next kernel back). As a GEMM it is the weights read once
    and tensor-core arithmetic: float16, or TF32 in float32 as the convs' (device_util.py,
    gemms_in_conv_precision).

    How: with W [C, C_out, 2s] viewed as [C, C_out·2s] (free), z[t] = joined[t] @ W holds,
    for input step t, its contribution to the 2s output samples from t·s; output block t
    (samples t·s … t·s + s − 1 of the new steps) is z[t + 1]'s first half plus z[t]'s second
    (the full convolution's blocks 1 … n: what the kept step makes room for)."""
    s = conv.stride[0]
    b, _, steps = joined.shape
    out = conv.out_channels
    z = transposed_product(joined, conv)
    y = z[:, 1:, :, :s] + z[:, :-1, :, s:]  # [B, n, C_out, s]
    y = y.permute(0, 2, 1, 3).reshape(b, out, (steps - 1) * s)
    return y if conv.bias is None else y + conv.bias[:, None]


def transposed_product(joined: torch.Tensor, conv: nn.ConvTranspose1d) -> torch.Tensor:
    """`upsample`'s GEMM: z [B, n + 1, C_out, 2s], each input step's contribution to the 2s
    output samples from its own (the overlap-add makes the output of it)."""
    s = conv.stride[0]
    b, c, steps = joined.shape
    z = torch.matmul(joined.transpose(1, 2), conv.weight.view(c, conv.out_channels * 2 * s))
    return z.view(b, steps, conv.out_channels, 2 * s)


def pointwise(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """A 1×1 conv on x [B, C, n]. In half precision it is a matmul on x's own layout: cuDNN's
    1×1 convs transposed their input to channels-last and back around every call (beside
    Orpheus' steps on an H200, ~0.6 ms of a 15-ms codec job in float32). In float32 it stays
    cuDNN's conv: the form its TF32 arithmetic was measured in."""
    if x.dtype == torch.float32:
        return conv(x)
    y = torch.matmul(conv.weight[:, :, 0], x)
    return y if conv.bias is None else y + conv.bias[:, None]


def symmetric_conv(joined: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv` over `joined` without padding. While being compiled (--compile-codec), a
    depthwise conv or a conv to one output channel runs as shifted multiply-adds (`conv_taps`),
    which the compiler fuses with the mask and the Snake before it into one kernel reading
    its input once: as F.conv1d the depthwise one ran the generic depthwise kernel, ~6× slower
    than its bytes allow (190 µs a call for Orpheus' batched jobs on an H200, in float32), and
    cuDNN ran the output conv after a channels-last transpose. Eager, k multiply-adds cost
    more than those kernels, so F.conv1d."""
    if torch.compiler.is_compiling() and _has_taps(conv):
        return conv_taps(joined, conv)
    return F.conv1d(joined, conv.weight, conv.bias, dilation=conv.dilation, groups=conv.groups)


def _has_taps(conv: nn.Conv1d) -> bool:
    depthwise = conv.groups == conv.in_channels == conv.out_channels
    return depthwise or (conv.groups == 1 and conv.out_channels == 1)


def conv_taps(joined: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """A depthwise conv (groups = channels), or a conv to one output channel, over `joined`
    without padding, as k shifted views: F.conv1d's values, summed in another order.
    Depthwise, the sum of the k shifted, per-channel-scaled views. To one channel, each tap's
    sum over the channels first, all k as one GEMM [k, C] @ joined, then the k shifted
    one-channel lines added: a sum over channels inside a compiled kernel tripped Inductor's
    tiling analysis on CUDA (torch 2.11: AssertionError in tiling_utils), and the GEMM reads
    the input once."""
    k, d = conv.kernel_size[0], conv.dilation[0]
    n = joined.shape[-1] - d * (k - 1)
    if conv.groups == conv.in_channels == conv.out_channels:
        weight = conv.weight[:, 0, :, None]  # [C, k, 1]
        y = joined[..., :n] * weight[:, 0]
        for tap in range(1, k):
            y = y + joined[..., tap * d : tap * d + n] * weight[:, tap]
    else:
        per_tap = torch.matmul(conv.weight[0].transpose(0, 1), joined)  # [B, k, n + d(k-1)]
        y = per_tap[:, :1, :n]
        for tap in range(1, k):
            y = y + per_tap[:, tap : tap + 1, tap * d : tap * d + n]
    return y if conv.bias is None else y + conv.bias[:, None]


def _half_width(conv: nn.Conv1d) -> int:
    """A symmetric conv's one-sided reach; SNAC pads every conv by exactly that."""
    k, d = conv.kernel_size[0], conv.dilation[0]
    h = d * (k - 1) // 2
    if conv.stride[0] != 1 or conv.padding[0] != h or d * (k - 1) % 2:
        raise ValueError(f"streaming SNAC needs symmetric stride-1 convs, got {conv}")
    return h


def _masked(x: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    """x (its first sample at `start` [B]) with its samples before the stream's start or at
    `end` [B] and past zeroed: what the whole decode's zero padding puts there."""
    pos = start[:, None] + torch.arange(x.shape[-1], device=x.device)
    keep = (pos >= 0) & (pos < end[:, None])
    return x * keep[:, None, :].to(x.dtype)
