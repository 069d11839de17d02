"""Greedy decoding through the engine equals transformers' reference on the same weights (fp32),
with requests of mixed lengths joining and leaving mid-flight."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.orpheus import tokens as T
from models.orpheus.loading import load_orpheus

TEXTS = [
    "Hello there.",
    "The quick brown fox jumps over the lazy dog.",
    "Hi!",
    "Streaming audio should start quickly and never stall.",
    "One, two, three.",
    "A slightly longer sentence, so that its prompt spans several KV pages of sixteen tokens.",
    "Okay.",
    "Good morning, how can I help you today?",
    "Numbers like 42 and 1999 are text too.",
]


@pytest.fixture(scope="module")
def hf_llama(tiny_orpheus_dirs):
    from transformers import LlamaForCausalLM

    model_dir, _ = tiny_orpheus_dirs
    return LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def load(tiny_orpheus_dirs, constrain: bool):
    model_dir, codec_dir = tiny_orpheus_dirs
    return load_orpheus(
        str(model_dir),
        str(codec_dir),
        torch.device("cpu"),
        torch.float32,
        constrain_audio_tokens=constrain,
    )


def run_staggered(core: EngineCore, specs: list[SpeechRequest], join_every: int = 3):
    """Admit requests a few steps apart, so they join a running batch and leave it at
    different times; return each request's output tokens and finish events."""
    pending = list(specs)
    requests, finished = [], {}
    step = 0
    while pending or core.has_work():
        if pending and step % join_every == 0:
            requests.append(core.add_request(pending.pop(0)))
        for event in core.step():
            if isinstance(event, Finished):
                finished[event.request_id] = event
        step += 1
    return requests, finished


def hf_generate(hf_llama, prompt: list[int], n: int, **kwargs) -> list[int]:
    out = hf_llama.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        pad_token_id=0,
        **kwargs,
    )
    return out[0, len(prompt) :].tolist()


def test_greedy_engine_tokens_equal_transformers_generate(tiny_orpheus_dirs, hf_llama):
    model = load(tiny_orpheus_dirs, constrain=False)
    # A small batch and token budget force queueing, chunked prefill and mixed steps.
    config = EngineConfig(
        max_num_seqs=4,
        max_batch_tokens=48,
        num_kv_blocks=256,
        block_size=16,
        realtime_admission=False,  # numerics, not capacity: every request is admitted
    )
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    lengths = [12, 30, 7, 25, 18, 9, 33, 14, 21]
    specs = [
        SpeechRequest(
            text,
            sampling=SamplingParams(
                temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n
            ),
        )
        for text, n in zip(TEXTS, lengths, strict=True)
    ]
    requests, finished = run_staggered(core, specs)
    assert len(requests) == 9 and len(finished) == 9
    for req, n in zip(requests, lengths, strict=True):
        assert finished[req.request_id].reason == FinishReason.LENGTH
        assert req.output_ids == hf_generate(hf_llama, req.prompt_ids, n), req.request_id
    assert core.blocks.num_used == 0


class OrpheusPositionRule:
    """The audio-token rule written against the HF generate loop, independently of the model's
    own masking: at output position n only the 4096 tokens of code slot n % 7."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        lo, hi = T.audio_range(input_ids.shape[1] - self.prompt_len)
        masked = torch.full_like(scores, float("-inf"))
        masked[:, lo:hi] = scores[:, lo:hi]
        return masked


def test_constrained_greedy_with_repetition_penalty_equals_reference(tiny_orpheus_dirs, hf_llama):
    from transformers import LogitsProcessorList

    model = load(tiny_orpheus_dirs, constrain=True)
    core = EngineCore(
        model,
        EngineConfig(max_num_seqs=3, num_kv_blocks=128, realtime_admission=False),
        torch.device("cpu"),
        "sdpa",
    )
    lengths = [21, 35, 14, 28]
    specs = [
        SpeechRequest(
            text,
            sampling=SamplingParams(
                temperature=0.0, repetition_penalty=1.3, max_tokens=n, min_tokens=n
            ),
        )
        for text, n in zip(TEXTS, lengths, strict=False)
    ]
    requests, _ = run_staggered(core, specs, join_every=2)
    for req, n in zip(requests, lengths, strict=True):
        rule = LogitsProcessorList([OrpheusPositionRule(len(req.prompt_ids))])
        expected = hf_generate(
            hf_llama, req.prompt_ids, n, repetition_penalty=1.3, logits_processor=rule
        )
        assert req.output_ids == expected
        assert all(T.code_of(t, i) is not None for i, t in enumerate(req.output_ids))


def test_seeded_sampling_is_reproducible_whatever_the_batch(tiny_orpheus_dirs):
    model = load(tiny_orpheus_dirs, constrain=True)
    params = SamplingParams(
        temperature=0.8, top_p=0.9, top_k=50, seed=7, max_tokens=14, min_tokens=14
    )

    def tokens_with_company(n_others: int) -> list[int]:
        core = EngineCore(model, EngineConfig(num_kv_blocks=128), torch.device("cpu"), "sdpa")
        target = core.add_request(SpeechRequest("Hello there.", sampling=params))
        for i in range(n_others):
            core.add_request(SpeechRequest(TEXTS[i], sampling=SamplingParams(max_tokens=14)))
        while core.has_work():
            core.step()
        return target.output_ids

    alone = tokens_with_company(0)
    assert alone == tokens_with_company(3)
    assert len(set(alone)) > 1


def test_cancel_frees_pages_at_once_and_finishes_the_stream(tiny_orpheus_dirs):
    model = load(tiny_orpheus_dirs, constrain=True)
    core = EngineCore(model, EngineConfig(num_kv_blocks=64), torch.device("cpu"), "sdpa")
    keep = core.add_request(
        SpeechRequest("Hello there.", sampling=SamplingParams(max_tokens=20, min_tokens=20))
    )
    drop = core.add_request(SpeechRequest(TEXTS[5], sampling=SamplingParams(max_tokens=200)))
    for _ in range(3):
        core.step()
    used = core.blocks.num_used
    events = core.cancel(drop.request_id)
    assert [e.reason for e in events] == [FinishReason.CANCELLED]
    assert core.blocks.num_used < used
    assert core.cancel(drop.request_id) == []  # idempotent
    while core.has_work():
        core.step()
    assert len(keep.output_ids) == 20
    assert core.blocks.num_used == 0


def test_a_short_listener_sent_to_the_codec_early_gets_audio_from_each_job(
    tiny_orpheus_dirs, tmp_path
):
    """An engine far behind real time (its clock runs 50x): every listener is short of audio,
    so the scheduler sends it to the codec as soon as it has a new frame past SNAC's
    look-ahead (the model's codec_would_emit), fewer than a 4-frame chunk. Such a hurried job
    lets out the frames it has, so no job but each request's final flush is empty, whether
    the scheduler asks codec_would_emit or not (before, SNAC emitted whole chunks only, and
    without the hook most of those job parts gave nothing); the audio is the same either
    way."""
    import time

    import numpy as np

    from engine.outputs import AudioChunk
    from engine.request_trace import read_traces, summarize

    model = load(tiny_orpheus_dirs, constrain=True)
    empty, audio, early = {}, {}, {}
    for hooked in (True, False):
        trace = tmp_path / f"trace-{hooked}.jsonl"
        config = EngineConfig(num_kv_blocks=256, trace_path=str(trace), realtime_admission=False)
        core = EngineCore(
            model, config, torch.device("cpu"), "sdpa", clock=lambda: 50 * time.monotonic()
        )
        if not hooked:
            core.scheduler.codec_would_emit = None
        assert (core.scheduler.codec_would_emit is not None) == hooked
        specs = [
            SpeechRequest(
                f"Listener {i} speaks.",
                sampling=SamplingParams(seed=i, max_tokens=98, min_tokens=98),
            )
            for i in range(3)
        ]
        reqs = [core.add_request(s) for s in specs]
        pieces: dict[str, list] = {r.request_id: [] for r in reqs}
        while core.has_work():
            for event in core.step():
                if isinstance(event, AudioChunk):
                    pieces[event.request_id].append(event.pcm)
        totals = core.audio.totals
        early[hooked] = (totals.early_rows, totals.codec_rows)
        core.close()
        empty[hooked] = summarize(read_traces(trace))["empty_chunks"]
        audio[hooked] = [np.concatenate(pieces[r.request_id]) for r in reqs]
    assert empty[True] <= 3 and empty[False] <= 3  # at most each request's final flush
    for early_rows, codec_rows in early.values():  # the loop counts the rows it hurried
        assert 0 < early_rows < codec_rows
    for with_hook, without in zip(audio[True], audio[False], strict=True):
        assert with_hook.shape == without.shape
        rms = float(np.sqrt(np.mean(without**2)))
        assert float(np.max(np.abs(with_hook - without))) < 1e-4 * rms  # chunking aside, exact
