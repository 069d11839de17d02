"""The first chunk's cover is a contract between the scheduler and each model's codec: the
audio a stream's first detokenizer job makes of its first k tokens is what the scheduler
counts on (`Scheduler.first_chunk_audio_s`: the facts' rule of whole frames, or the model's
own count where its tokens are not all audio), never less, and no more than a token's worth
above it. Counting on more is how first chunks went out short of their cover: SNAC's first job
once emitted only whole ramp chunks (314 ms where 561 were counted), random-weight Chatterbox
drew undecodable rows, and a GLM-4-Voice reply's first 13 tokens are text. Every tiny preset
with a codec: real tokens from an engine run, a fresh stream for each k."""

from __future__ import annotations

import pytest

from models.registry import load_model
from tests.models.engine_run import SPOKEN_TURNS, TEXT_TO_SPEECH, generated


@pytest.mark.parametrize("name", TEXT_TO_SPEECH + SPOKEN_TURNS)
def test_a_first_job_makes_the_audio_the_scheduler_counts_on(name):
    model = load_model(name)
    facts = model.facts
    n = facts.first_chunk_tokens + 4 * max(facts.chunk_tokens, 8)
    core, request, _ = generated(model, n)
    token_s = facts.seconds_per_token
    checked = 0
    first = facts.first_chunk_tokens
    for k in range(first, n, max(1, (n - first) // 12)):  # a dozen sizes, mid-frame too
        (pcm,) = model.detokenize([model.new_stream_state()], [request.output_ids[:k]], [False])
        made = len(pcm) / facts.sample_rate
        counted = core.scheduler.first_chunk_audio_s(request, k)
        assert counted <= made + 1e-6, (k, made, counted)
        assert made - counted <= token_s + 1e-6, (k, made, counted)
        checked += made > 0
    assert checked >= 3  # the stream's first audio came, and grew, within the range
