"""The decode step's head + sampling as one fixed-shape call (engine/sampling_graphs.py): what a
graph replay computes, run eagerly on the same static buffers, draws the eager sampler's
tokens and leaves its tables as the eager sampler leaves them."""

from __future__ import annotations

import torch

from engine.request import SamplingParams
from engine.sampling import Sampler, SamplingRow
from engine.sampling_graphs import SamplingGraphs
from models.base import Candidates, RepetitionAwareSampling

VOCAB, HIDDEN, BASE, K, STOPS = 300, 16, 40, 120, 2  # candidates: ids [BASE, BASE + K)
BUCKETS = (1, 2, 4, 8)
CPU = torch.device("cpu")

PARAMS = [
    SamplingParams(seed=11, temperature=1.0, top_k=25, top_p=0.8),  # CosyVoice 2's defaults
    SamplingParams(temperature=0.0),  # greedy
    SamplingParams(seed=12, temperature=0.7, top_k=0, top_p=0.9, repetition_penalty=1.3),
    SamplingParams(seed=13, temperature=1.2, top_k=5, top_p=1.0),  # top-k alone, beside a nucleus
    SamplingParams(seed=14, temperature=1.0, top_k=25, top_p=0.8, min_p=0.1),  # with min-p
]


def make_head(seed: int = 0):
    """A speech head in CosyVoice 2's shape: K candidate columns whose last STOPS are stop
    tokens, masked in rows not yet allowed to stop. Peaked logits, so repetition-aware
    sampling's redraw fires."""
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(K, HIDDEN, generator=g)
    weight[7] *= 6.0  # one token far likelier than the rest: loops for RAS to break

    def head(hidden: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor) -> Candidates:
        logits = hidden @ weight.T
        logits[:, K - STOPS :].masked_fill_(~allow_stop[:, None], float("-inf"))
        ids = torch.arange(BASE, BASE + K)
        return Candidates(logits, ids.expand(hidden.shape[0], K))

    return head


def new_sampler() -> Sampler:
    sampler = Sampler(VOCAB, CPU, rows=4, repetition_aware=RepetitionAwareSampling(window=10))
    for i, params in enumerate(PARAMS):
        sampler.add_request(f"r{i}", params, [BASE + 3, BASE + 7, 5])
    return sampler


def run_both(steps: int, rows_of_step, allow_of_step):
    """Steps through an eager sampler and the static graph path side by side; returns the
    tokens of both and the two samplers."""
    head = make_head()
    eager, fixed = new_sampler(), new_sampler()
    hidden_buffer = torch.zeros(BUCKETS[-1], HIDDEN)
    graphs = SamplingGraphs(head, fixed, hidden_buffer, BUCKETS, CPU)
    g = torch.Generator().manual_seed(1)
    out_eager, out_fixed = [], []
    for step in range(steps):
        rows = rows_of_step(step)
        allow = allow_of_step(step, len(rows))
        hidden = torch.randn(len(rows), HIDDEN, generator=g)
        hidden_buffer[: len(rows)] = hidden
        hidden_buffer[len(rows) :] = torch.randn(BUCKETS[-1] - len(rows), HIDDEN, generator=g)
        cands = head(hidden, torch.tensor(allow), torch.full((len(rows),), step))
        out_eager.append(eager.sample_on_device(cands, rows).tolist())
        assert graphs.fits(len(rows), rows)
        out_fixed.append(graphs.run_static(rows, allow).tolist())
    return out_eager, out_fixed, eager, fixed


def rows_for(indices: list[int], step: int) -> list[SamplingRow]:
    return [SamplingRow(f"r{i}", PARAMS[i], step) for i in indices]


def test_fixed_sampling_equals_the_eager_sampler_step_by_step():
    """Mixed greedy / nucleus / penalised / top-k rows in buckets with padding (3 → 4, 5 → 8),
    stops blocked in some rows: the same tokens every step, and the same presence table and
    repetition window afterwards (which the next steps read)."""

    def rows_of_step(step):
        return rows_for([0, 1, 2, 3, 4] if step % 2 else [0, 2, 4], step)

    def allow_of_step(step, n):
        return [step > 6 or i % 2 == 0 for i in range(n)]

    eager_tokens, fixed_tokens, eager, fixed = run_both(40, rows_of_step, allow_of_step)
    assert fixed_tokens == eager_tokens
    for i in range(len(PARAMS)):
        a, b = eager.row_of(f"r{i}"), fixed.row_of(f"r{i}")
        assert torch.equal(eager._seen[a], fixed._seen[b])
        assert torch.equal(eager._recent[a], fixed._recent[b])
    # The draws are not trivially one token: the peaked head's loops were broken by RAS, and
    # the greedy row (r1) is the argmax every step.
    drawn = [t[0] for t in fixed_tokens]
    assert len(set(drawn)) > 3
    assert BASE + K - 1 not in drawn[:7] and BASE + K - 2 not in drawn[:7]  # stops blocked


def test_padding_rows_touch_only_the_scratch_row():
    head = make_head()
    sampler = new_sampler()
    before_seen, before_recent = sampler._seen.clone(), sampler._recent.clone()
    graphs = SamplingGraphs(head, sampler, torch.randn(BUCKETS[-1], HIDDEN), BUCKETS, CPU)
    rows = rows_for([1], 0)  # one greedy row in bucket 1, then in bucket 8 via 5 rows
    graphs.run_static(rows, [True])
    graphs.run_static(rows_for([0, 1, 2, 3, 4], 1), [True] * 5)
    owned = {sampler.row_of(f"r{i}") for i in range(len(PARAMS))}
    for row in range(before_seen.shape[0]):
        if row in owned or row == sampler.scratch_row:
            continue
        assert torch.equal(sampler._seen[row], before_seen[row])
        assert torch.equal(sampler._recent[row], before_recent[row])
    assert sampler._seen[sampler.scratch_row].any()  # padding wrote there


def test_fits_only_steps_the_graph_draws_exactly():
    sampler = new_sampler()
    graphs = SamplingGraphs(make_head(), sampler, torch.zeros(BUCKETS[-1], HIDDEN), BUCKETS, CPU)
    assert graphs.fits(2, rows_for([0, 1], 0))  # a nucleus row: the eager path sorts too
    assert graphs.fits(1, rows_for([1], 0))  # all greedy
    # Drawn rows without a nucleus: the eager sampler takes its top-k threshold path.
    assert not graphs.fits(2, rows_for([1, 3], 0))
    assert not graphs.fits(9, rows_for([0] * 9, 0))  # past the largest bucket
    # Tables reallocated after capture (more live requests than reserved): eager from then on.
    for i in range(sampler.capacity):
        sampler.add_request(f"extra{i}", PARAMS[0], [])
    assert not graphs.fits(1, rows_for([0], 0))
