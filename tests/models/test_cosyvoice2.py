"""CosyVoice 2's LLM stage through the engine against a transformers Qwen2ForCausalLM decode on
the same weights (the published llm.pt), prompt layout, RAS and checkpoint errors."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError, RepetitionAwareSampling
from models.checkpoint_errors import CheckpointError
from models.cosyvoice2 import configs
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from models.registry import load_model
from tests.models.engine_run import eager_and_graphed_runs, run

TEXTS = ["Hello there.", "The quick brown fox.", "Hi!", "One, two, three."]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cosyvoice2") / "model"
    write_cosyvoice2_checkpoint(folder, configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025)
    return folder


@pytest.fixture(scope="module")
def model(tiny_dir):
    m = load_cosyvoice2(str(tiny_dir), torch.device("cpu"), torch.float32, name="tiny-cosyvoice2")
    rng = np.random.default_rng(3)
    m.add_voice(
        "clip",
        "This is me.",
        0.1 * rng.standard_normal(32000).astype(np.float32),
        0.1 * rng.standard_normal(48000).astype(np.float32),
    )
    return m


@pytest.fixture(scope="module")
def reference(tiny_dir):
    """Qwen2ForCausalLM holding llm.pt's backbone, and llm.pt's speech embedding and head."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    state = torch.load(tiny_dir / "llm.pt", weights_only=True)
    qwen = Qwen2ForCausalLM(Qwen2Config.from_dict(configs.TINY_QWEN2)).eval()
    qwen.load_state_dict(
        {k.removeprefix("llm.model."): v for k, v in state.items() if k.startswith("llm.model.")}
    )
    return qwen, state


def reference_decode(reference, text_ids: list[int], speech_prompt: list[int], n: int) -> list[int]:
    """Qwen2LM.inference's loop (sos, text, task_id, prompt speech; last hidden state → llm_decoder),
    greedy, with the stop rows masked for the first n tokens as the engine's min_tokens does."""
    qwen, state = reference
    s = 6561
    emb = qwen.model.embed_tokens
    x = torch.cat(
        [
            state["llm_embedding.weight"][0:1],
            emb(torch.tensor(text_ids)),
            state["llm_embedding.weight"][1:2],
            state["speech_embedding.weight"][torch.tensor(speech_prompt, dtype=torch.long)],
        ]
    )[None]
    out, cache = [], None
    with torch.no_grad():
        for _ in range(n):
            res = qwen(inputs_embeds=x, cache=cache, use_cache=True, output_hidden_states=True)
            cache = res.past_key_values  # transformers 5: passed back as `cache`
            logits = torch.nn.functional.linear(
                res.hidden_states[-1][0, -1], state["llm_decoder.weight"], state["llm_decoder.bias"]
            )
            logits[s:] = float("-inf")
            top = int(logits.argmax())
            out.append(top)
            x = state["speech_embedding.weight"][top][None, None]
    return out


def test_greedy_speech_tokens_equal_qwen2_reference_batched(model, reference):
    config = EngineConfig(max_num_seqs=8, max_batch_tokens=64, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    lengths = [9, 6, 8, 7]
    voices = ["narrator", "clip", "guide", "clip"]
    specs = [
        SpeechRequest(
            t,
            v,
            SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n),
        )
        for t, v, n in zip(TEXTS, voices, lengths, strict=True)
    ]
    requests, audio, finished, peak = run(core, specs)
    assert peak == 4
    ids = model.ids
    for req, text, voice, n in zip(requests, TEXTS, voices, lengths, strict=True):
        v = model.voices.get(voice)
        want = reference_decode(reference, v.text_ids + model.text_ids(text), v.llm_tokens, n)
        got = [ids.code_of(t) for t in req.output_ids]
        assert got == want, req.request_id
        assert finished[req.request_id].reason == FinishReason.LENGTH
        # Final flush: every token's two mel frames become 480 samples each.
        assert sum(len(c) for c in audio[req.request_id]) == n * 2 * 480
    assert core.blocks.num_used == 0


def async_and_sync_runs(model, device: torch.device, voices: list[str]):
    """Seeded requests through the engine with and without async scheduling: for each, a list
    of (tokens, audio) per request."""
    specs = [
        SpeechRequest(t, v, SamplingParams(seed=i, max_tokens=n, min_tokens=n))
        for i, (t, v, n) in enumerate(zip(TEXTS, voices, [30, 12, 26, 18], strict=True))
    ]
    results = {}
    for overlapped in (False, True):
        config = EngineConfig(
            max_num_seqs=4, max_batch_tokens=64, num_kv_blocks=64, async_scheduling=overlapped
        )
        core = EngineCore(model, config, device, "sdpa")
        assert core.async_scheduling == overlapped
        requests, audio, _, _ = run(core, copy.deepcopy(specs))
        results[overlapped] = [
            (r.output_ids, np.concatenate(audio[r.request_id])) for r in requests
        ]
        assert core.blocks.num_used == 0
    return results[False], results[True]


def test_async_scheduling_equals_the_synchronous_step(model):
    """CosyVoice 2 samples with its repetition-aware rule, whose window is a ring on the device,
    so it runs with async scheduling (step n+1 launched before step n's tokens reach the
    host) and gives the same seeded tokens and audio as the synchronous step."""
    sync, overlapped = async_and_sync_runs(
        model, torch.device("cpu"), ["narrator", "clip", "guide", "clip"]
    )
    assert [tokens for tokens, _ in overlapped] == [tokens for tokens, _ in sync]
    for (_, pcm), (_, a_pcm) in zip(sync, overlapped, strict=True):
        np.testing.assert_allclose(a_pcm, pcm, atol=1e-5)


def test_arrivals_from_the_prompt_graphs_change_nothing(model):
    """CosyVoice 2's prompts (text and a voice's speech tokens) through the prompt graphs
    beside decodes (Worker._launch_graphed, as the CPU runs the graph sets): the same seeded
    tokens and audio as eager forwards, its repetition-aware sampling included."""
    from tests.cpu_graphs import with_cpu_graphs

    specs = [
        SpeechRequest(t, v, SamplingParams(seed=i, max_tokens=n, min_tokens=n))
        for i, (t, v, n) in enumerate(
            zip(TEXTS, ["narrator", "clip", "guide", "clip"], [30, 12, 26, 18], strict=True)
        )
    ]
    config = EngineConfig(
        max_num_seqs=4, max_batch_tokens=512, num_kv_blocks=64, async_scheduling=True
    )
    eager, from_graphs, graphed = eager_and_graphed_runs(
        model, specs, config, lambda w: with_cpu_graphs(w, prompt_buckets=(64, 128, 256))
    )
    assert len(graphed) >= 2 and max(graphed) > 1  # arrivals beside decodes, from graphs
    assert [tokens for tokens, _ in from_graphs] == [tokens for tokens, _ in eager]
    for (_, pcm), (_, g_pcm) in zip(eager, from_graphs, strict=True):
        np.testing.assert_allclose(g_pcm, pcm, atol=1e-5)


def test_prompt_layout(model):
    ids = model.ids
    # GET /v1/voices tells the spk2info presets from the voices made from clips.
    assert "narrator" in model.facts.voices and model.facts.voices[-1] == "clip"
    assert model.facts.clip_voices == ("clip",) and model.facts.voice_cloning
    plain = model.preprocess("Hi!", "narrator").token_ids
    assert plain == [ids.sos, *model.text_ids("Hi!"), ids.task_id]
    v = model.voices.get("clip")
    cloned = model.preprocess("Hi!", "clip").token_ids
    assert cloned == [
        ids.sos,
        *model.text_ids("This is me."),
        *model.text_ids("Hi!"),
        ids.task_id,
        *[ids.speech(s) for s in v.llm_tokens],
    ]
    assert len(v.flow_tokens) % 25 == 0 and v.mel.shape == (2 * len(v.flow_tokens), 80)
    with pytest.raises(ModelInputError, match="unknown voice"):
        model.preprocess("Hi!", "nobody")
    with pytest.raises(ModelInputError, match="empty"):
        model.preprocess("  ", None)


def test_a_text_makes_between_2_and_20_speech_tokens_a_text_token(model):
    """The published inference's length rule (min/max_token_text_ratio), counted on the text
    to speak alone, not the voice prompt's transcript: the engine holds a request to it (its
    stop tokens held back until the fewest) unless the request fixes its own length."""
    text = "Hello there, how are you today?"
    n = len(model.text_ids(text))
    assert model.preprocess(text, "clip").length == (2 * n, 20 * n)
    core = EngineCore(model, EngineConfig(), torch.device("cpu"), "sdpa")
    asked = SamplingParams(temperature=0.0, repetition_penalty=1.0, seed=0)
    bounded = core.add_request(SpeechRequest(text, "clip", asked))
    assert (bounded.sampling.min_tokens, bounded.sampling.max_tokens) == (2 * n, 20 * n)
    exact = SamplingParams(temperature=0.0, min_tokens=500, max_tokens=500)
    assert core.add_request(SpeechRequest(text, "clip", exact)).sampling == exact
    while core.has_work():
        core.step()
    assert 2 * n <= len(bounded.output_ids) <= 20 * n


def test_a_clients_voice_is_served_unlisted_within_the_graphs_and_forgotten(model):
    """add_clip_voice (voices from clients): the clip at its own rate, resampled to the 16 and
    24 kHz the encoders take; served by name but never listed nor the default; its flow
    prompt cut to the chunks the CUDA graphs captured at start-up cover; gone once removed."""
    from models.voice_clip import VoiceClip, resample

    audio = (0.1 * np.random.default_rng(9).standard_normal(6 * 48000)).astype(np.float32)
    facts = model.facts
    nbytes = model.add_clip_voice("clip-0123", VoiceClip(audio, 48000, "This is me."))
    try:
        assert model.facts == facts  # not listed, default unchanged
        v = model.voices.get("clip-0123")
        assert nbytes >= v.mel.numel() * 4 + v.embedding.numel() * 4
        covered = max((model.detok.GRAPH_PROMPT_CHUNKS, *model.detok.long_prompts))
        assert len(v.flow_tokens) == covered * model.detok.chunk  # 6 s of clip, cut to 3
        whole = model.voices.add_voice(
            "whole",
            model.text_ids("This is me."),
            resample(audio, 48000, 16000),
            resample(audio, 48000, 24000),
            client=True,
        )
        assert whole.llm_tokens == v.llm_tokens  # the LLM prompt keeps every token
        assert whole.flow_tokens[-len(v.flow_tokens) :] == v.flow_tokens  # the clip's last
        torch.testing.assert_close(whole.mel[-v.mel.shape[0] :], v.mel)
        prompt = model.preprocess("Hi!", "clip-0123").token_ids
        assert prompt[-len(v.llm_tokens) :] == [model.ids.speech(t) for t in v.llm_tokens]
        with pytest.raises(ModelInputError, match="transcript"):
            model.add_clip_voice("clip-x", VoiceClip(audio, 48000, " "))
        with pytest.raises(ModelInputError, match="taken"):
            model.add_clip_voice("narrator", VoiceClip(audio, 48000, "Me."))
    finally:
        model.remove_clip_voice("clip-0123")
        model.remove_clip_voice("whole")
    with pytest.raises(ModelInputError, match="unknown voice"):
        model.preprocess("Hi!", "clip-0123")


def test_repetition_aware_sampling_redraws_repeats():
    """A top-1 draw whose token already fills max_repeats places of the request's recent window
    (a ring on the device, written by each step) is drawn again from the whole distribution;
    the window holds only the last `window` draws and starts empty for a new request."""
    from engine.request import SamplingParams as SP
    from engine.sampling import Sampler, SamplingRow
    from models.base import Candidates

    ras = RepetitionAwareSampling(window=3, tau_r=0.5)  # redraw at 2 repeats in 3 draws
    sampler = Sampler(8, torch.device("cpu"), repetition_aware=ras)
    params = SP(temperature=1.0, top_k=1, top_p=1.0, repetition_penalty=1.0, seed=1)
    logits = torch.tensor([[5.0, 4.9, 4.8, 4.7, 4.6, 4.5, 4.4, 4.3]])
    for _ in range(2):  # the second request reuses the first one's row: its window starts empty
        sampler.add_request("r", params, [])
        draws = []
        for step in range(60):
            row = SamplingRow("r", params, step)
            draws.append(sampler.sample(Candidates(logits.clone(), None), [row])[0])
            window = draws[-4:-1]  # the draws this one could see
            if window.count(0) < 2:
                assert draws[-1] == 0  # top-1, not repeated enough: kept
        assert draws[:2] == [0, 0]
        assert len(set(draws)) > 1  # token 0 repeats: redrawn from the whole distribution
        sampler.drop_request("r")

    plain = Sampler(8, torch.device("cpu"))
    plain.add_request("p", params, [])
    rows = [SamplingRow("p", params, step) for step in range(20)]
    assert {plain.sample(Candidates(logits.clone(), None), [r])[0] for r in rows} == {0}


def test_missing_file_is_named(tiny_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_dir, broken)
    (broken / "flow.pt").unlink()
    with pytest.raises(CheckpointError, match="flow.pt"):
        load_cosyvoice2(str(broken), torch.device("cpu"), torch.float32)
    state = torch.load(tiny_dir / "hift.pt", weights_only=True)
    state.pop("conv_post.bias")
    (broken / "flow.pt").write_bytes((tiny_dir / "flow.pt").read_bytes())
    torch.save(state, broken / "hift.pt")
    with pytest.raises(CheckpointError, match="conv_post.bias"):
        load_cosyvoice2(str(broken), torch.device("cpu"), torch.float32)


def test_first_hop_sets_the_first_chunk_and_is_validated():
    """The first audio chunk is first_hop speech tokens plus the flow's 3 look-ahead ones; HiFT
    holds 4 tokens (8 mel frames) back. A hop outside [5, 25] is refused at load, saying why."""
    model = load_model("tiny-cosyvoice2", options={"first_hop_tokens": 9})
    facts = model.facts
    assert (facts.first_chunk_tokens, facts.chunk_tokens, facts.lookahead_tokens) == (12, 25, 3)
    assert facts.held_back_tokens == 4 and model.detok.first_hop == 9
    assert load_model("tiny-cosyvoice2").facts.first_chunk_tokens == 20 + 3  # the default
    with pytest.raises(ValueError, match=r"first_hop_tokens must be in \[5, 25\]"):
        load_model("tiny-cosyvoice2", options={"first_hop_tokens": 30})
    with pytest.raises(CheckpointError, match="CosyVoice 2's first chunk"):
        load_model("tiny-orpheus", options={"first_hop_tokens": 9})


def test_a_long_voice_clip_joins_the_graph_buckets(tiny_dir, caplog):
    """A voice clip of 4 s or more: its prompt's windows are captured with the others
    (FlowHiftDetokenizer.cover_prompt), so its streams' codec jobs replay graphs; a clip past
    what the graphs cover is loaded with a warning that says so."""
    m = load_cosyvoice2(str(tiny_dir), torch.device("cpu"), torch.float32, name="tiny-cosyvoice2")
    rng = np.random.default_rng(5)

    def clip(seconds: float) -> tuple[np.ndarray, np.ndarray]:
        return tuple(
            (0.1 * rng.standard_normal(int(rate * seconds))).astype(np.float32)
            for rate in (16000, 24000)
        )

    m.add_voice("long", "A longer clip of speech.", *clip(6))
    chunks = len(m.voices.get("long").flow_tokens) // m.detok.chunk
    assert chunks > m.detok.GRAPH_PROMPT_CHUNKS
    assert m.detok.long_prompts == {chunks}
    assert m.first_chunk_lane_codec().detok.long_prompts == {chunks}  # the lane's twin too
    m.detok.MAX_GRAPH_PROMPT_CHUNKS = chunks - 1  # as if the clip were past the cap
    m.add_voice("longer", "A longer clip of speech.", *clip(6))
    assert "past the" in caplog.text and m.detok.long_prompts == {chunks}
