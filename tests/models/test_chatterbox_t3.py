"""Chatterbox's T3 against the official package (`chatterbox-tts`, `make reference-deps`):
seeded random weights in the official module, saved as t3_cfg.safetensors and loaded through
Voxgate's loader; greedy tokens with classifier-free guidance (and the repetition penalty)
must be equal, fp32 on the CPU. The official sampler has no greedy switch: min_p = 1 keeps
only the likeliest token, which is what is compared."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from models.chatterbox.config import T3_FACTS, t3_sizes
from models.chatterbox.sampling import T3Sampling, keep_min_p, keep_top_p, penalise_repeats
from models.chatterbox.t3 import load_t3, t3_state_dict
from models.chatterbox.t3_decode import T3Request, generate_speech_tokens
from models.checkpoint_errors import CheckpointError
from tests.models.official_chatterbox_t3 import (
    build_official_t3,
    engine_model_around,
    official_tokens,
    our_t3,
)


@pytest.fixture(scope="module")
def official_t3():
    return build_official_t3()


@pytest.fixture(scope="module")
def ours(official_t3, tmp_path_factory):
    return our_t3(official_t3[2], tmp_path_factory.mktemp("t3"))


def conditioning(seed: int, prompt_len: int = 20):
    g = torch.Generator().manual_seed(seed)
    speaker = torch.randn(256, generator=g)
    prompt = torch.randint(0, 6561, (prompt_len,), generator=g)
    text = [
        T3_FACTS.start_text,
        *torch.randint(1, 704, (12,), generator=g).tolist(),
        T3_FACTS.stop_text,
    ]
    return speaker, prompt, text


@pytest.mark.parametrize(
    ("seed", "exaggeration", "cfg_weight"), [(1, 0.5, 0.5), (2, 1.5, 0.0), (3, 0.25, 1.0)]
)
def test_greedy_tokens_with_cfg_equal_official(official_t3, ours, seed, exaggeration, cfg_weight):
    speaker, prompt, text = conditioning(seed)
    n = 40
    expected = official_tokens(official_t3, speaker, prompt, text, exaggeration, cfg_weight, n)
    request = T3Request(text, speaker, prompt, exaggeration, max_new_tokens=n)
    got = generate_speech_tokens(ours, request, T3Sampling(cfg_weight=cfg_weight, greedy=True))
    assert len(set(expected)) > 3, "the comparison needs varied tokens"
    assert got == expected


def test_cfg_weight_changes_the_tokens(ours):
    """Guidance is not inert: the same request with and without it generates differently."""
    speaker, prompt, text = conditioning(1)
    request = T3Request(text, speaker, prompt, max_new_tokens=30)
    a = generate_speech_tokens(ours, request, T3Sampling(cfg_weight=0.0, greedy=True))
    b = generate_speech_tokens(ours, request, T3Sampling(cfg_weight=1.0, greedy=True))
    assert a != b


def test_sizes_read_off_the_checkpoint_and_saved_back_in_the_published_layout(official_t3, ours):
    theirs = official_t3[2]
    sizes = t3_sizes(theirs)
    assert (sizes.hidden, sizes.layers, sizes.intermediate, sizes.kv_heads) == (1024, 2, 256, 4)
    assert (sizes.text_vocab, sizes.speech_vocab, sizes.perceiver_queries) == (704, 8194, 32)
    back = t3_state_dict(ours)
    assert set(back) == set(theirs)
    assert all(torch.equal(back[k], theirs[k]) for k in theirs)


def test_loader_names_what_is_missing(official_t3):
    state = dict(official_t3[2])
    del state["cond_enc.emotion_adv_fc.weight"]
    with pytest.raises(CheckpointError, match="emotion_adv_fc"):
        load_t3(state)


def test_sampling_rules_match_transformers_processors():
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 50, generator=g) * 3
    ids = torch.randint(0, 50, (3, 7), generator=g)
    seen = torch.zeros(3, 50, dtype=torch.bool).scatter(1, ids, True)
    want = RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone())
    torch.testing.assert_close(penalise_repeats(logits, seen, 1.3), want)
    torch.testing.assert_close(keep_min_p(logits, 0.1), MinPLogitsWarper(0.1)(ids, logits.clone()))
    torch.testing.assert_close(keep_top_p(logits, 0.8), TopPLogitsWarper(0.8)(ids, logits.clone()))


def test_tiny_preset_uses_the_official_names_and_conds(official_t3, tmp_path):
    """The tiny preset's t3_cfg.safetensors has exactly the official T3's tensor names (same
    depth, other widths), and its conds.pt's `t3` builds the official T3Cond."""
    from models.chatterbox.presets import ensure_tiny_chatterbox

    folder = ensure_tiny_chatterbox(tmp_path)
    assert set(load_file(str(folder / "t3_cfg.safetensors"))) == set(official_t3[2])
    conds = torch.load(str(folder / "conds.pt"), weights_only=True)
    cond = official_t3[1](**conds["t3"])
    assert cond.cond_prompt_speech_tokens.shape == (1, T3_FACTS.speech_cond_prompt_len)


@pytest.fixture(scope="module")
def engine_model(ours, tmp_path_factory):
    """The engine's ChatterboxModel around the official weights' T3, sampling all 8,194 rows
    as the official does."""
    return engine_model_around(ours, tmp_path_factory.mktemp("c"))


def test_one_batch_with_two_option_settings_gives_the_official_tokens(official_t3, engine_model):
    """Two requests in one engine batch, each with its own exaggeration and CFG weight
    (SpeechRequest.model_options): each gets the tokens the official T3 generates for its own
    setting."""
    from engine.config import EngineConfig
    from engine.core import EngineCore
    from engine.outputs import SpeechRequest
    from engine.request import SamplingParams
    from tests.models.engine_run import run

    model, n = engine_model, 16
    voice = model.parts.default_voice.t3
    text = "Options travel with each request."
    text_ids = model.parts.tokenizer.text_ids(text)
    settings = [{"exaggeration": 1.5, "cfg_weight": 0.0}, {"exaggeration": 0.3, "cfg_weight": 1.0}]
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=512, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.2, max_tokens=n)
    specs = [SpeechRequest(text, None, params, model_options=s) for s in settings]
    requests, _, _, peak = run(core, specs)
    assert peak == 2
    wanted = []
    for request, setting in zip(requests, settings, strict=True):
        want = official_tokens(
            official_t3,
            voice.speaker,
            voice.prompt_tokens,
            text_ids,
            setting["exaggeration"],
            setting["cfg_weight"],
            n,
        )
        got = [row[0] - model.ids.speech_base for row in request.output_ids]
        got = [t for t in got if t != T3_FACTS.stop_speech]
        assert got == want, setting
        wanted.append(want)
    # The same text: only the options tell the two apart, so ignoring them fails the test.
    assert wanted[0] != wanted[1]


def test_min_p_matches_the_official_processor_per_row():
    """The engine sampler's min-p (engine/sampling.py), each row with its own value, equals
    transformers' MinPLogitsWarper, which T3.inference applies."""
    from transformers.generation.logits_process import MinPLogitsWarper

    from engine.sampling import keep_min_p as engine_min_p

    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 80, generator=g) * 4
    values = [0.0, 0.05, 0.3]
    got = engine_min_p(logits, torch.tensor(values))
    ids = torch.zeros(1, 1, dtype=torch.long)
    for row, value in enumerate(values):
        want = logits[row : row + 1].clone()
        if value > 0:
            want = MinPLogitsWarper(value)(ids, want)
        torch.testing.assert_close(got[row : row + 1], want)
    assert int(got[0].isfinite().sum()) == 80 and int(got[2].isfinite().sum()) < 80
