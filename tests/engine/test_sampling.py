"""The sampler's top-k / top-p masks: the top-k threshold used when no row has a nucleus keeps
what the sorted path keeps."""

from __future__ import annotations

import torch

from engine.sampling import top_k_top_p


def test_top_k_without_a_nucleus_equals_the_sorted_path():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 300, generator=g)  # continuous: no ties
    top_k = torch.tensor([0, 1, 7, 299, 400])  # all, one, some, all but one, more than V
    top_p = torch.ones(5)
    sorted_path = top_k_top_p(logits, top_k, top_p)
    fast = top_k_top_p(logits, top_k, top_p, nucleus=False, max_k=400)
    assert torch.equal(fast, sorted_path)
    assert [int(r.isfinite().sum()) for r in fast] == [300, 1, 7, 299, 300]


def test_top_k_threshold_keeps_ties_and_masked_rows():
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0, float("-inf")]])
    out = top_k_top_p(logits, torch.tensor([2]), torch.ones(1), nucleus=False, max_k=2)
    assert out[0].isfinite().tolist() == [True, True, True, False, False]  # the tie at k stays


def test_depth_sampler_draws_equal_one_noise_pass_per_codebook():
    """DeviceCodeSampler computes the noise of NOISE_BLOCK codebooks in one pass; each draw must
    equal the draw made with that codebook's noise alone (race_noise keyed by the seed mixed
    with the codebook index), greedy rows their argmax."""
    from engine.code_sampling import _CODEBOOK_SALT, NOISE_BLOCK, DeviceCodeSampler
    from engine.request import SamplingParams
    from engine.sampling import SamplingRow, race_noise

    params = [
        SamplingParams(temperature=0.8, top_k=5),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.3, top_k=0, top_p=0.9),
    ]
    rows = [SamplingRow(str(i), p, step=7 + i) for i, p in enumerate(params)]
    seeds = [11, 22, 33]
    sampler = DeviceCodeSampler.for_rows(rows, seeds, torch.device("cpu"))
    x, plan = sampler.inputs, sampler.plan
    torch.manual_seed(0)
    for index in range(1, 2 * NOISE_BLOCK + 2):  # across block boundaries
        logits = torch.randn(3, 50) * 3
        scaled = logits / x.temperature[:, None]
        probs = top_k_top_p(scaled, x.top_k, x.top_p, plan.nucleus, plan.max_k).softmax(-1)
        codes = torch.arange(50).expand(3, 50)
        noise = race_noise((x.seeds ^ (index * _CODEBOOK_SALT)) & 0xFFFFFFFF, x.steps, codes)
        want = torch.where(x.greedy, logits.argmax(-1), (probs / noise).argmax(-1))
        assert torch.equal(sampler(logits, index), want)


def test_min_p_is_per_row_and_only_drops_unlikely_tokens():
    """Rows of one batch with min_p 0 and 0.2 over the same logits: the 0.2 row never draws a
    token below a fifth of the likeliest one's probability (after temperature); the 0 row
    does, so the rule is what tells them apart."""
    from engine.request import SamplingParams
    from engine.sampling import Sampler, SamplingRow
    from models.base import Candidates

    logits = torch.linspace(0.0, 4.0, 40)[None].repeat(2, 1)  # token 39 likeliest
    probs = (logits[0] / 1.5).softmax(-1)
    allowed = set((probs >= 0.2 * probs.max()).nonzero().flatten().tolist())
    drawn: list[set[int]] = [set(), set()]
    for seed in range(200):
        sampler = Sampler(40, torch.device("cpu"), rows=2)
        rows = []
        for i, min_p in enumerate((0.0, 0.2)):
            params = SamplingParams(
                temperature=1.5,
                top_p=1.0,
                repetition_penalty=1.0,
                seed=seed * 7919 + 13,
                min_p=min_p,
            )
            sampler.add_request(f"r{i}", params, [])
            rows.append(SamplingRow(f"r{i}", params, step=seed))
        a, b = sampler.sample(Candidates(logits.clone(), None), rows)
        drawn[0].add(a)
        drawn[1].add(b)
    assert drawn[1] <= allowed and len(drawn[1]) > 1
    assert drawn[0] - allowed
