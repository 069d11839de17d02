"""The fixed-shape cached solve (models/codecs/flow_hift/static_cache.py) equals the eager cached
solve (estimator_cache.solve_euler_cached) row by row: rows with different context lengths
padded to one bucket, a part-chunk padded to a whole one, padding rows; and it makes no host
syncs, so a CUDA graph can capture it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from models.codecs.flow_hift.estimator_cache import PassCache, solve_euler_cached
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.static_cache import ConvLayout, attention_shape, static_cached_solve
from tests.models.test_estimator_cache import inputs
from tests.models.test_flow_hift import detok as detok  # noqa: F401 - the fixture


def pass_cache_to_static(
    caches: list[PassCache], layout: ConvLayout
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """estimator_cache's per-step PassCaches (one batch) → (keys, values [S, A, B, L, D],
    packed convolution history [S, B, W]): the eager cache in the static layout."""
    keys = torch.stack([torch.stack(c.keys) for c in caches])
    values = torch.stack([torch.stack(c.values) for c in caches])
    convs = torch.stack([layout.pack(c.convs) for c in caches])
    return keys, values, convs


class DenseContext:
    """Context handed over as whole tensors: keys and values [S, A, 2R, L, D], valid [2R, L],
    conv [S, 2R, W]; the chunk's own keys and values are collected (`new_keys`, `new_values`
    [S, A, 2R, T, D]). (The engine's context, cache_pool.PoolContext, reads a pool and writes them into it.)"""

    def __init__(self, keys, values, valid, conv) -> None:
        self._keys, self._values, self.valid, self._conv = keys, values, valid, conv
        self._new: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(self, step: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """The chunk's keys and values [2R, T, D] at (step, layer), once that layer has read
        its context."""
        self._new[step, layer] = (k, v)

    def _stacked(self, which: int) -> torch.Tensor:
        steps = 1 + max(s for s, _ in self._new)
        layers = 1 + max(a for _, a in self._new)
        return torch.stack(
            [torch.stack([self._new[s, a][which] for a in range(layers)]) for s in range(steps)]
        )

    @property
    def new_keys(self) -> torch.Tensor:
        return self._stacked(0)

    @property
    def new_values(self) -> torch.Tensor:
        return self._stacked(1)

    def keys(self, step: int, layer: int) -> torch.Tensor:
        return self._keys[step, layer]

    def values(self, step: int, layer: int) -> torch.Tensor:
        return self._values[step, layer]

    def conv(self, step: int) -> torch.Tensor:
        return self._conv[step]


@pytest.fixture(scope="module")
def flow(detok) -> CausalFlow:  # noqa: F811 - test_flow_hift's tiny flow + HiFT, seeded
    return detok.flow


def eager_context(flow, chunks: int, seed: int):
    """One stream's context after `chunks` chunks (eager), and its next chunk's inputs."""
    chunk = flow.decoder.estimator.chunk
    z, mu, cond, spks = inputs(flow, rows=1, frames=(chunks + 1) * chunk, seed=seed)
    caches = None
    for c in range(chunks):
        s = slice(c * chunk, (c + 1) * chunk)
        _, caches = solve_euler_cached(flow, z[:, :, s], mu[:, :, s], spks, cond[:, :, s], caches)
    s = slice(chunks * chunk, (chunks + 1) * chunk)
    return caches, (z[:, :, s], mu[:, :, s], cond[:, :, s], spks)


@torch.inference_mode()
def test_a_padded_bucket_equals_each_rows_eager_solve(flow):
    chunk = flow.decoder.estimator.chunk
    layout = ConvLayout.of(flow.decoder.estimator)
    # Row 0: 3 chunks of context, a whole new chunk. Row 1: 1 chunk of context, a part-chunk
    # of chunk - 3 frames. Row 2: padding (no context, a "whole" chunk of zeros).
    setups = [(3, chunk, 11), (1, chunk - 3, 12)]
    bucket_l = 3 * chunk
    rows = len(setups) + 1
    steps = flow.cfg.n_timesteps
    layers, width = attention_shape(flow.decoder.estimator)
    m = flow.cfg.output_size
    ctx_k = torch.zeros(steps, layers, 2 * rows, bucket_l, width)
    ctx_v = torch.zeros_like(ctx_k)
    ctx_valid = torch.zeros(2 * rows, bucket_l, dtype=torch.bool)
    conv = torch.zeros(steps, 2 * rows, layout.width)
    z, mu, cond = (torch.zeros(rows, m, chunk) for _ in range(3))
    spks = torch.zeros(rows, m)
    n_new = torch.full((rows,), chunk)
    expected = []
    for i, (chunks, n, seed) in enumerate(setups):
        caches, (zi, mui, condi, spksi) = eager_context(flow, chunks, seed)
        keys, values, convs = pass_cache_to_static(caches, layout)
        frames = keys.shape[3]
        for half, row in ((0, i), (1, rows + i)):  # conditional, unconditional
            ctx_k[:, :, row, :frames] = keys[:, :, half]
            ctx_v[:, :, row, :frames] = values[:, :, half]
            ctx_valid[row, :frames] = True
            conv[:, row] = convs[:, half]
        z[i, :, :n], mu[i, :, :n], cond[i, :, :n], spks[i] = (
            zi[0, :, :n],
            mui[0, :, :n],
            condi[0, :, :n],
            spksi[0],
        )
        n_new[i] = n
        mel, after = solve_euler_cached(
            flow, zi[:, :, :n], mui[:, :, :n], spksi, condi[:, :, :n], caches
        )
        expected.append((n, frames, mel, *pass_cache_to_static(after, layout)))
    # Shuffle row 0's context slots: keys are order-free (a ring), the result must not change.
    order = torch.randperm(3 * chunk, generator=torch.Generator().manual_seed(3))
    ctx_k[:, :, 0], ctx_v[:, :, 0] = ctx_k[:, :, 0, order], ctx_v[:, :, 0, order]
    ctx_k[:, :, rows], ctx_v[:, :, rows] = ctx_k[:, :, rows, order], ctx_v[:, :, rows, order]

    context = DenseContext(ctx_k, ctx_v, ctx_valid, conv)
    mel, new_conv = static_cached_solve(flow, z, mu, spks, cond, n_new, context, layout)
    new_k, new_v = context.new_keys, context.new_values
    assert mel.shape == (rows, m, chunk) and new_k.shape == (steps, layers, 2 * rows, chunk, width)
    for i, (n, frames, ref_mel, ref_k, ref_v, ref_conv) in enumerate(expected):
        torch.testing.assert_close(mel[i, :, :n], ref_mel[0], atol=1e-5, rtol=1e-5)
        for half, row in ((0, i), (1, rows + i)):
            # The eager cache grew by the chunk's real frames: the static call returns those.
            torch.testing.assert_close(
                new_k[:, :, row, :n], ref_k[:, :, half, frames:], atol=1e-5, rtol=1e-5
            )
            torch.testing.assert_close(
                new_v[:, :, row, :n], ref_v[:, :, half, frames:], atol=1e-5, rtol=1e-5
            )
            torch.testing.assert_close(new_conv[:, row], ref_conv[:, half], atol=1e-5, rtol=1e-5)
    assert torch.isfinite(mel).all()  # the padding row too: no all-masked attention


def test_the_static_solve_makes_no_host_syncs(flow):
    # A device read (.item(), a data-dependent shape) would fail a CUDA graph capture. Fake
    # tensors have no data: such a read raises here.
    layout = ConvLayout.of(flow.decoder.estimator)
    chunk = flow.decoder.estimator.chunk
    layers, width = attention_shape(flow.decoder.estimator)
    steps, m, rows, bucket_l = flow.cfg.n_timesteps, flow.cfg.output_size, 2, 2 * chunk
    with torch.inference_mode(), FakeTensorMode(allow_non_fake_inputs=True):
        context = DenseContext(
            torch.zeros(steps, layers, 2 * rows, bucket_l, width),
            torch.zeros(steps, layers, 2 * rows, bucket_l, width),
            F.pad(torch.ones(2 * rows, 1, dtype=torch.bool), (0, bucket_l - 1)),
            torch.zeros(steps, 2 * rows, layout.width),
        )
        mel, new_conv = static_cached_solve(
            flow,
            torch.zeros(rows, m, chunk),
            torch.zeros(rows, m, chunk),
            torch.zeros(rows, m),
            torch.zeros(rows, m, chunk),
            torch.full((rows,), chunk),
            context,
            layout,
        )
        assert mel.shape == (rows, m, chunk) and new_conv.shape == (steps, 2 * rows, layout.width)
        assert context.new_keys.shape == (steps, layers, 2 * rows, chunk, width)
