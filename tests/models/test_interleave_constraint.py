"""The random-weights interleave constraint (models/interleave.py): with it, a reply's tokens
follow the model's block rule exactly (text positions draw text ids, speech positions speech
codes, stops only after whole blocks) and carry speech at the trained rate, on the engine's
eager path and on the fixed-shape path a CUDA graph replays; without it (the default,
trained checkpoints) the models sample as before."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import FinishReason, SpeechRequest
from engine.request import SamplingParams
from engine.sampling import Sampler, SamplingRow
from engine.sampling_graphs import SamplingGraphs
from models.base import block_stops
from models.glm_voice.loading import load_glm_voice
from models.glm_voice.model import SPEECH_TOKEN_RATE_HZ, TRAINED_INTERLEAVE
from models.glm_voice.presets import ensure_tiny_glm_voice
from models.interleave import InterleaveConstraint, InterleaveRule
from models.step_audio2.loading import load_step_audio2
from models.step_audio2.model import CODE_RATE_HZ, RANDOM_WEIGHTS_INTERLEAVE
from models.step_audio2.presets import ensure_tiny_step_audio2
from tests.models.engine_run import run

CPU = torch.device("cpu")


def glm(interleave: InterleaveRule | None):
    root = ensure_tiny_glm_voice()
    return load_glm_voice(
        str(root / "glm-4-voice-9b"),
        CPU,
        torch.float32,
        decoder=str(root / "glm-4-voice-decoder"),
        speech_tokenizer=str(root / "glm-4-voice-tokenizer"),
        interleave=interleave,
    )


def step_audio2(interleave: InterleaveRule | None):
    root = ensure_tiny_step_audio2()
    return load_step_audio2(
        str(root), CPU, torch.float32, token2wav=str(root / "token2wav"), interleave=interleave
    )


def test_the_mask_allows_each_position_its_kind_and_stops_after_whole_blocks():
    rule = InterleaveRule(text=2, speech=3)
    c = InterleaveConstraint(rule, 20, range(0, 6), range(10, 16), stop_ids=(18,))
    steps = torch.arange(12)
    allow = steps >= 5  # min_tokens 5
    out = c.apply(torch.zeros(12, 20), allow, steps)
    for step in range(12):
        ok = {int(i) for i in torch.nonzero(out[step].isfinite())}
        kind = set(range(10, 16)) if rule.is_speech_position(step) else set(range(6))
        assert ok == kind | ({18} if step >= 5 and step % 5 == 0 else set()), step
    assert [rule.speech_codes(n) for n in (0, 2, 3, 5, 7, 11)] == [0, 0, 1, 3, 3, 6]
    assert TRAINED_INTERLEAVE.tokens_per_second(SPEECH_TOKEN_RATE_HZ) == 18.75
    with pytest.raises(ValueError, match="overlap"):
        InterleaveConstraint(rule, 20, range(0, 12), range(10, 16), stop_ids=())


def reply(model, params: list[SamplingParams], text: str = "Hello there."):
    """Replies to a typed turn, one per sampling setting, with their audio and Finished."""
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=128, num_kv_blocks=128, block_size=16)
    core = EngineCore(model, config, CPU, "sdpa")
    specs = [SpeechRequest("", turns=(model.user_text_turn(text),), sampling=p) for p in params]
    return run(core, specs)


def check_replies(model, rule: InterleaveRule, is_speech, blocks: int, code_rate: float):
    """Replies of `blocks` whole blocks, drawn (the reference sampling) and greedy:
    every token of its position's kind, the codes of `blocks` blocks, and audio as long as
    the tokens last at the model's token rate (codes at the trained rate)."""
    n = blocks * rule.period
    defaults = model.facts.sampling_defaults
    params = [SamplingParams(seed=s, max_tokens=n, min_tokens=n, **defaults) for s in (1,)] + [
        SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n)
    ]
    requests, audio, finished, _ = reply(model, params)
    sample_rate = model.facts.sample_rate
    for req in requests:
        out = list(req.output_ids)
        assert finished[req.request_id].reason == FinishReason.LENGTH and len(out) == n
        kinds = [is_speech(t) for t in out]
        assert kinds == [rule.is_speech_position(p) for p in range(n)]
        assert all(model.is_text_token(t) for t, s in zip(out, kinds, strict=True) if not s)
        codes = sum(kinds)
        assert codes == rule.speech_codes(n) == blocks * rule.speech
        seconds = n / model.facts.token_rate_hz  # what `voxgate bench` asks for with n tokens
        assert codes / seconds == pytest.approx(code_rate)
        heard = sum(len(a) for a in audio[req.request_id]) / sample_rate
        assert heard == pytest.approx(codes / code_rate, abs=0.02)
    assert len({tuple(r.output_ids) for r in requests}) == 2  # drawn and greedy differ


def test_glm_voice_replies_follow_13_text_26_speech_with_the_constraint():
    model = glm(TRAINED_INTERLEAVE)
    assert model.graphable_candidates()
    check_replies(model, TRAINED_INTERLEAVE, model.ids.is_audio, 2, SPEECH_TOKEN_RATE_HZ)


def test_step_audio2_replies_follow_5_text_25_codes_with_the_constraint():
    model = step_audio2(RANDOM_WEIGHTS_INTERLEAVE)
    assert model.graphable_candidates()
    speech = lambda t: model.ids.code_of(t) is not None  # noqa: E731
    check_replies(model, RANDOM_WEIGHTS_INTERLEAVE, speech, 2, CODE_RATE_HZ)


@pytest.mark.parametrize("load", [glm, step_audio2])
def test_off_by_default_sampling_is_unconstrained(load):
    """Trained checkpoints load without the constraint: eager candidates are the whole
    vocabulary with only the stops held back, no sampling graph is offered, and a reply's
    mix is the weights' own (here not the block rule)."""
    model = load(None)
    assert model.interleave is None and not model.graphable_candidates()
    assert model.device_candidates(torch.zeros(1, 1), torch.ones(1, dtype=torch.bool), None) is None
    hidden = torch.randn(3, model.shape.hidden_size, generator=torch.Generator().manual_seed(0))
    cands = model.candidate_logits(hidden, [0, 5, 9], [False, True, True])
    expected = block_stops(
        model.compute_logits(hidden), [False, True, True], model.facts.stop_token_ids
    )
    assert cands.token_ids is None and torch.equal(cands.logits, expected)
    rule = TRAINED_INTERLEAVE if load is glm else RANDOM_WEIGHTS_INTERLEAVE
    n = 2 * rule.period
    (req,), _, _, _ = reply(model, [SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n)])
    speech = [not model.is_text_token(t) for t in req.output_ids]
    assert speech != [rule.is_speech_position(p) for p in range(len(speech))]


@pytest.mark.parametrize("load", [glm, step_audio2])
def test_graphable_constrained_sampling_equals_the_eager_path(load):
    """The head + sampler as one fixed-shape call (what a CUDA graph replays) draws the eager
    path's tokens, rows at different block positions, across the block boundary where a
    stop becomes allowed."""
    rule = TRAINED_INTERLEAVE if load is glm else RANDOM_WEIGHTS_INTERLEAVE
    model = load(rule)
    defaults = model.facts.sampling_defaults
    params = [SamplingParams(seed=s, **defaults) for s in range(3)] + [
        SamplingParams(temperature=0.0)
    ]
    buckets = (1, 2, 4)

    def sampler() -> Sampler:
        s = Sampler(model.shape.vocab_size, CPU, rows=8)
        for i, p in enumerate(params):
            s.add_request(f"r{i}", p, [])
        return s

    eager, fixed = sampler(), sampler()
    buffer = torch.zeros(buckets[-1], model.shape.hidden_size)
    graphs = SamplingGraphs(model.device_candidates, fixed, buffer, buckets, CPU)
    g = torch.Generator().manual_seed(0)
    stops = set(model.facts.stop_token_ids)
    for step in range(rule.period - 3, rule.period + 8):
        generated = [step, step + 1, step + rule.text, step + 2]
        rows = [
            SamplingRow(f"r{i}", p, n)
            for i, (p, n) in enumerate(zip(params, generated, strict=True))
        ]
        allow = [n >= rule.period for n in generated]
        hidden = torch.randn(len(rows), model.shape.hidden_size, generator=g) * 4
        buffer[: len(rows)] = hidden
        expected = eager.sample_on_device(model.candidate_logits(hidden, generated, allow), rows)
        assert graphs.fits(len(rows), rows)
        tokens = graphs.run_static(rows, allow).tolist()
        assert tokens == expected.tolist()
        for n, token in zip(generated, tokens, strict=True):
            if token in stops:
                assert n % rule.period == 0 and n >= rule.period
            else:
                assert model.is_text_token(token) != rule.is_speech_position(n)
