"""The cached flow estimator (models/codecs/flow_hift/estimator_cache.py): integrating an
utterance one attention chunk at a time over cached keys, values and convolution history gives
the whole-utterance streaming solve (every chunk attending to all earlier ones), and a bounded
context changes later chunks only."""

from __future__ import annotations

import pytest
import torch

from models.codecs.flow_hift.estimator_cache import solve_euler_cached
from models.codecs.flow_hift.flow import CausalFlow
from tests.models.test_flow_hift import detok as detok  # noqa: F401 - the fixture


@pytest.fixture(scope="module")
def flow(detok) -> CausalFlow:  # noqa: F811 - test_flow_hift's tiny flow + HiFT, seeded
    return detok.flow


def inputs(flow: CausalFlow, rows: int, frames: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    m = flow.cfg.output_size
    z = torch.randn(rows, m, frames, generator=g)
    mu = torch.randn(rows, m, frames, generator=g)
    cond = torch.zeros(rows, m, frames)
    cond[:, :, : frames // 4] = torch.randn(rows, m, frames // 4, generator=g)  # a prompt's mel
    spks = torch.randn(rows, m, generator=g)
    return z, mu, cond, spks


@torch.inference_mode()
def test_chunk_by_chunk_over_the_cache_equals_the_whole_streaming_solve(flow):
    chunk = flow.decoder.estimator.chunk  # frames per attention chunk
    z, mu, cond, spks = inputs(flow, rows=2, frames=4 * chunk, seed=1)
    mask = torch.ones(2, 1, z.shape[-1])
    whole = flow.solve_euler(z, mu, mask, spks, cond)  # chunks = frame // chunk

    caches, parts = None, []
    for c in range(4):
        s = slice(c * chunk, (c + 1) * chunk)
        mel, caches = solve_euler_cached(flow, z[:, :, s], mu[:, :, s], spks, cond[:, :, s], caches)
        parts.append(mel)
    assert caches[0].frames == 4 * chunk and len(caches) == flow.cfg.n_timesteps
    torch.testing.assert_close(torch.cat(parts, dim=2), whole, atol=1e-5, rtol=1e-5)


@torch.inference_mode()
def test_a_bounded_context_changes_only_the_chunks_past_it(flow):
    chunk = flow.decoder.estimator.chunk
    z, mu, cond, spks = inputs(flow, rows=1, frames=4 * chunk, seed=2)

    def run(keep: int | None) -> torch.Tensor:
        caches, parts = None, []
        for c in range(4):
            s = slice(c * chunk, (c + 1) * chunk)
            mel, caches = solve_euler_cached(
                flow, z[:, :, s], mu[:, :, s], spks, cond[:, :, s], caches
            )
            if keep is not None:
                caches = [p.prompt_and_last(0, keep) for p in caches]
            parts.append(mel)
        return torch.cat(parts, dim=2)

    full, bounded = run(None), run(2 * chunk)
    # The first three chunks never had more than two chunks of context to drop.
    torch.testing.assert_close(bounded[:, :, : 3 * chunk], full[:, :, : 3 * chunk])
    assert not torch.allclose(bounded[:, :, 3 * chunk :], full[:, :, 3 * chunk :], atol=1e-4)
