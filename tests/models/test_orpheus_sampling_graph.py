"""Orpheus' head and sampler as one fixed-shape call (what a CUDA graph of the decode step's
sampling replays, engine/sampling_graphs.py): the code position comes from each row's output
position on the device, and the tokens equal the eager path's, step by step, across frame
boundaries where the stop token becomes allowed."""

from __future__ import annotations

import torch

from engine.request import SamplingParams
from engine.sampling import Sampler, SamplingRow
from engine.sampling_graphs import SamplingGraphs
from models.orpheus import tokens as T
from models.orpheus.loading import load_orpheus

CPU = torch.device("cpu")
BUCKETS = (1, 2, 4, 8)


def test_graphable_orpheus_sampling_equals_the_eager_path(tiny_orpheus_dirs):
    model_dir, codec_dir = tiny_orpheus_dirs
    model = load_orpheus(str(model_dir), str(codec_dir), CPU, torch.float32)
    params = [SamplingParams(seed=s, **model.facts.sampling_defaults) for s in range(3)] + [
        SamplingParams(temperature=0.0)
    ]
    hidden_size = model.shape.hidden_size

    def sampler() -> Sampler:
        s = Sampler(model.shape.vocab_size, CPU, rows=8)
        for i, p in enumerate(params):
            s.add_request(f"r{i}", p, [])
        return s

    eager, fixed = sampler(), sampler()
    buffer = torch.zeros(BUCKETS[-1], hidden_size)
    graphs = SamplingGraphs(model.device_candidates, fixed, buffer, BUCKETS, CPU)
    g = torch.Generator().manual_seed(0)
    drawn_stop_allowed = []
    for step in range(20):
        # Rows at different output positions: their code positions (mod 7) differ.
        generated = [step, step + 3, step + 5, step + 1]
        rows = [
            SamplingRow(f"r{i}", p, n)
            for i, (p, n) in enumerate(zip(params, generated, strict=True))
        ]
        allow = [n >= 7 for n in generated]
        hidden = torch.randn(len(rows), hidden_size, generator=g) * 4
        buffer[: len(rows)] = hidden
        cands = model.candidate_logits(hidden, generated, allow)
        expected = eager.sample_on_device(cands, rows).tolist()
        assert graphs.fits(len(rows), rows)
        tokens = graphs.run_static(rows, allow).tolist()
        assert tokens == expected
        for n, token in zip(generated, tokens, strict=True):
            if token == T.END_OF_SPEECH:
                drawn_stop_allowed.append(n % T.CODES_PER_FRAME == 0 and n >= 7)
            else:  # an audio token of the row's own code position
                assert T.code_of(token, n % T.CODES_PER_FRAME) is not None
    assert all(drawn_stop_allowed)
