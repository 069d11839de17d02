"""Qwen3-TTS with streamed text (tiny preset, fp32 on the CPU): text that arrives in pieces
while the request generates gives the codes of the official package's streaming-text
generate (non_streaming_mode=False) on the whole text, with the same random weights, for a
preset speaker and for a Base model's cloned voices (x-vector only, and in context with the
clip's codes and transcript); the engine holds the request while it has no text and never
ends it before the final text."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import Finished, FinishReason, SpeechRequest
from engine.request import Request, SamplingParams
from models.base import ModelInputError
from models.qwen3_tts.streamed_text import StreamedText, safe_cut
from models.text_feed import TextFeed
from tests.models.official_qwen3_tts import run_official
from tests.models.qwen3_tts.qwen3_tts_clip import clip_audio, tiny_cloner

PIECES = ["Hello the", "re, how are", " you today?"]
FRAMES = 40
# The in-context voice's transcript: short, so that the clip's frames (a second's worth)
# reach past it and the prompt lines the streamed text up with them.
CLIP_TEXT = "Hi."


@pytest.fixture(scope="module")
def cloner(tmp_path_factory):
    return tiny_cloner(tmp_path_factory.mktemp("q3sbase") / "model", CLIP_TEXT)


def _core(model) -> EngineCore:
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    return EngineCore(model, config, torch.device("cpu"), "sdpa")


@dataclass
class Streamed:
    request: Request
    finished: list[Finished]
    waits: int  # engine steps it spent waiting for text
    prefilled_at: int | None  # how many pieces it had when its prompt was prefilled


def _streamed(model, pieces, options, steps_between: int = 8, voice: str = "ryan") -> Streamed:
    """Greedy frames of one request whose text comes in `pieces`, `steps_between` engine
    steps apart (the request runs dry of text in between)."""
    core = _core(model)
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=FRAMES)
    spec = SpeechRequest(pieces[0], voice, params, model_options=options, text_stream=True)
    request = core.add_request(spec)
    run = Streamed(request, [], 0, None)
    for i, piece in enumerate(pieces[1:], start=1):
        for _ in range(steps_between):
            run.waits += request.awaits_text
            run.finished += [e for e in core.step() if isinstance(e, Finished)]
            if request.prefilled and run.prefilled_at is None:
                run.prefilled_at = i
        core.append_text(request.request_id, piece, final=i == len(pieces) - 1)
    while core.has_work():
        run.finished += [e for e in core.step() if isinstance(e, Finished)]
    if run.prefilled_at is None and request.prefilled:
        run.prefilled_at = len(pieces)
    assert core.blocks.num_used == 0
    return run


def _official_job(model, folder, text: str, language: str, voice: str) -> dict:
    """The package's streaming-text generate of the whole `text`: a preset speaker, or a
    voice cloned from clip_audio() ("clip": x-vector only; "icl": with CLIP_TEXT)."""
    job = {
        "folder": str(folder),
        "input_ids": [
            model.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
        ],
        "instruct_ids": [None],
        "languages": [language],
        "speakers": [voice],
        "max_new_tokens": FRAMES,
        "non_streaming_mode": False,
    }
    if voice in ("clip", "icl"):
        job.update(speakers=[None], clone_audio=[clip_audio().tolist()])
    if voice == "icl":
        job["clone_text_ids"] = [model.encode(f"<|im_start|>assistant\n{CLIP_TEXT}<|im_end|>\n")]
    return job


def _frames(model, request) -> np.ndarray:
    return np.array([row[: model.k] for row in request.output_ids if not model.is_stop(row)])


def test_streamed_text_gives_the_official_streaming_generate_codes(model, folder, tmp_path):
    options = {"language": "english", "instruction": ""}
    run = _streamed(model, PIECES, options)
    assert run.waits > 0  # it did run out of text between pieces, and waited
    assert run.finished[0].reason in (FinishReason.STOP, FinishReason.LENGTH)
    text = "".join(PIECES)
    job = {"generate": [_official_job(model, folder, text, "english", "ryan")]}
    official = run_official(job, tmp_path)["codes0_0"]
    ours = _frames(model, run.request)
    # The engine never ends a streamed request before its final text is read (the package's
    # generate may): compared where the package read all its text too (its first token is in
    # the prompt, the rest and tts_eos one a frame). The package returns max_new_tokens - 1
    # frames when it runs to length (the last frame's codebooks 1-15 are never drawn).
    assert len(official) >= len(text), "the official generate stopped before reading the text"
    assert len(ours) >= len(official)
    np.testing.assert_array_equal(ours[: len(official)], official)


def test_cloned_voices_stream_text_as_the_official_generate_does(cloner, tmp_path):
    """A Base model's voices: x-vector only (the speaker row is the clip's x-vector, then the
    layout above), and in context, whose prompt pairs codec bos and the clip's frames row by
    row with the clip's transcript, the text and tts_eos (tts_pad past their end): streamed,
    the request is prefilled once its text reaches past the clip's frames, or is final."""
    folder, clone_model = cloner
    frames = len(clone_model._clones["icl"].reference.codes)
    transcript = len(clone_model.encode(CLIP_TEXT))
    # The tiny tokenizer's ids are bytes. PIECES' first piece gives "Hello" (its last word
    # waits), the second up to "Hello there, how": codec bos + the clip's frames come between.
    assert transcript + len("Hello") < 1 + frames <= transcript + len("Hello there, how")
    short = ["Yes ", "ok."]  # with its transcript and tts_eos, shorter than the clip
    assert transcript + len("Yes ok.") + 1 < 1 + frames
    asks = [
        ("clip", PIECES, "english", 1),  # prefilled with the first piece
        ("icl", PIECES, "english", 2),  # the first piece does not reach past the clip
        ("icl", short, "auto", 2),  # prefilled once final: the rest of the clip is tts_pad
    ]
    runs = [
        _streamed(clone_model, pieces, {"language": lang, "instruction": ""}, voice=voice)
        for voice, pieces, lang, _ in asks
    ]
    job = {
        "generate": [
            _official_job(clone_model, folder, "".join(pieces), lang, voice)
            for voice, pieces, lang, _ in asks
        ]
    }
    official = run_official(job, tmp_path)
    for j, ((voice, pieces, _, prefilled_at), run) in enumerate(zip(asks, runs, strict=True)):
        assert run.prefilled_at == prefilled_at, voice
        assert run.waits > 0
        want, ours = official[f"codes{j}_0"], _frames(clone_model, run.request)
        # Frames that take the text past the prompt (in context: the text beyond the clip's
        # frames), then tts_eos: the package must have read it all to be compared.
        text = len(clone_model.encode("".join(pieces)))
        trailing = text if voice == "clip" else max(transcript + text + 1 - (1 + frames), 0)
        assert len(want) >= trailing, f"{voice}: the official generate stopped early"
        assert len(want) > 0 and len(ours) >= len(want), voice
        np.testing.assert_array_equal(ours[: len(want)], want, err_msg=voice)


def test_the_text_column_carries_the_text_then_its_end_then_pads(model):
    request = _streamed(model, PIECES, {"language": "auto", "instruction": ""}, 1).request
    text = "".join(PIECES)
    ids = model.encode(text)
    column = [row[model.k] for row in request.output_ids]
    n = len(ids) - 1  # the first token is in the prompt's last row
    assert column[:n] == ids[1:]
    assert column[n] == model.ids.tts_eos
    assert set(column[n + 1 :]) <= {model.ids.tts_pad}
    assert request.prompt_ids[-1][0] == model.ids.bos and request.prompt_ids[-1][-1] == ids[0]


def test_text_fills_the_prompts_gaps_before_the_generated_frames():
    """TextFeed.prompt_gaps: ids go to the prompt's gaps first, in order (the request is not
    ready until they are filled), then one per generated frame; the final text leaves the
    gaps it does not reach to the filler."""
    rows = [(1, -1), (2, -1), (3, 10), (4, -1)]
    feed = TextFeed(column=1, filler=0, prompt_gaps=deque([0, 1, 3]))
    feed.extend([20], final=False)
    feed.fill_prompt(rows)
    assert rows == [(1, 20), (2, -1), (3, 10), (4, -1)] and not feed.ready
    feed.extend([21, 22, 23], final=False)
    feed.fill_prompt(rows)
    assert rows == [(1, 20), (2, 21), (3, 10), (4, 22)] and feed.ready and not feed.drained
    assert feed.take() == 23 and not feed.ready
    short = [(1, -1), (2, -1), (3, -1)]
    feed = TextFeed(column=1, filler=0, prompt_gaps=deque([0, 1, 2]))
    feed.extend([30], final=True)
    feed.fill_prompt(short)
    assert short == [(1, 30), (2, 0), (3, 0)] and feed.ready and feed.drained
    assert feed.take() == 0


def test_pieces_tokenise_as_the_whole_text():
    vocab: dict[str, int] = {}

    def encode(text: str) -> list[int]:
        """One id per pre-token, split as GPT-2 / Qwen2's byte-level BPE splits (a word takes
        the space before it; a run of spaces leaves its last to the next word)."""
        words = re.findall(r" ?\S+|\s+(?!\S)|\s+", text)
        return [vocab.setdefault(w, len(vocab)) for w in words]

    streamed = StreamedText(encode, 1000)
    got = []
    for piece in ["  Hel", "lo wor", "ld, and", " more  ", "text"]:
        got += streamed.add(piece, final=False)
    got += streamed.add(" end. ", final=True)
    assert got == encode("Hello world, and more  text end.")
    assert safe_cut("ab cd", 0) == 2 and safe_cut("abcd", 0) == 0 and safe_cut("a  b", 0) == 1


def test_streamed_text_is_refused_where_it_cannot_be_served(model):
    core = _core(model)
    params = SamplingParams(temperature=0.0, max_tokens=FRAMES)
    with pytest.raises(ModelInputError, match="whole word"):
        core.add_request(SpeechRequest("Hel", "ryan", params, text_stream=True))
    plain = core.add_request(SpeechRequest("Hello there.", "ryan", params))
    with pytest.raises(ModelInputError, match="not opened for streamed text"):
        core.append_text(plain.request_id, "more", final=True)
    streamed = core.add_request(SpeechRequest("Hello the", "ryan", params, text_stream=True))
    events = core.append_text(streamed.request_id, "x" * 5000, final=False)
    assert isinstance(events[0], Finished) and events[0].reason is FinishReason.FAILED
    assert "limit" in (events[0].error or "")
    assert core.append_text("no-such-request", "text", final=True) == []
    core.cancel(plain.request_id)
    assert not core.has_work()
