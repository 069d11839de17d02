"""Helpers of the GPU tests: graphs that replay and also run eagerly, to compare the two."""

from __future__ import annotations

import torch

from engine.cuda_graphs import CallableGraphs


class ComparedGraphs(CallableGraphs):
    """CallableGraphs that also runs every replayed function eagerly on the same inputs and
    keeps (key, replayed, eager) outputs."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.compared: list[tuple] = []

    def run(self, key, fn, inputs):
        if key not in self:
            return fn(*inputs)
        eager = fn(*[t.clone() for t in inputs])
        replayed = super().run(key, fn, inputs)
        pair = (replayed, eager) if isinstance(eager, torch.Tensor) else (replayed[0], eager[0])
        self.compared.append((key, pair[0].clone(), pair[1].clone()))
        return replayed


def random_streams(detok, n: int, g: torch.Generator, prompt_chunks: int = 1) -> list:
    """n new flow + HiFT streams with random prompt tokens (`prompt_chunks` chunks of 25),
    prompt mel and speaker."""
    return [
        detok.new_stream(
            torch.randint(0, 6561, (25 * prompt_chunks,), generator=g).tolist(),
            torch.randn(50 * prompt_chunks, 80, generator=g),
            torch.randn(192, generator=g),
        )
        for _ in range(n)
    ]
