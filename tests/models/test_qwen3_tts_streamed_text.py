"""Qwen3-TTS with streamed text (tiny preset, fp32 on the CPU): text that arrives in pieces
while the request generates gives the codes of the official package's streaming-text
generate (non_streaming_mode=False) on the whole text, with the same random weights; the
engine holds the request while it has no text and never ends it before the final text."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.qwen3_tts.checkpoint import load_qwen3_tts
from models.qwen3_tts.presets import ensure_tiny_qwen3_tts
from models.qwen3_tts.streamed_text import StreamedText, safe_cut
from tests.models.official_qwen3_tts import run_official

PIECES = ["Hello the", "re, how are", " you today?"]
FRAMES = 40


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_qwen3_tts(tmp_path_factory.mktemp("q3s"))


@pytest.fixture(scope="module")
def model(folder):
    return load_qwen3_tts(str(folder), torch.device("cpu"), torch.float32, name="tiny-qwen3-tts")


def _core(model) -> EngineCore:
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    return EngineCore(model, config, torch.device("cpu"), "sdpa")


def _streamed(model, pieces, options, steps_between: int = 8):
    """Greedy frames of one request whose text comes in `pieces`, `steps_between` engine
    steps apart (the request runs dry of text in between), and its Finished event."""
    core = _core(model)
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=FRAMES)
    spec = SpeechRequest(pieces[0], "ryan", params, model_options=options, text_stream=True)
    request = core.add_request(spec)
    finished = []
    waits = 0
    for i, piece in enumerate(pieces[1:], start=1):
        for _ in range(steps_between):
            waits += request.awaits_text
            finished += [e for e in core.step() if isinstance(e, Finished)]
        core.append_text(request.request_id, piece, final=i == len(pieces) - 1)
    while core.has_work():
        finished += [e for e in core.step() if isinstance(e, Finished)]
    assert core.blocks.num_used == 0
    return request, finished, waits


def test_streamed_text_gives_the_official_streaming_generate_codes(model, folder, tmp_path):
    options = {"language": "english", "instruction": ""}
    request, finished, waits = _streamed(model, PIECES, options)
    assert waits > 0  # it did run out of text between pieces, and waited
    assert finished[0].reason in (FinishReason.STOP, FinishReason.LENGTH)
    text = "".join(PIECES)
    job = {
        "generate": [
            {
                "folder": str(folder),
                "input_ids": [
                    model.encode(
                        f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"
                    )
                ],
                "instruct_ids": [None],
                "languages": ["english"],
                "speakers": ["ryan"],
                "max_new_tokens": FRAMES,
                "non_streaming_mode": False,
            }
        ]
    }
    official = run_official(job, tmp_path)["codes0_0"]
    ours = np.array([row[: model.k] for row in request.output_ids if not model.is_stop(row)])
    # The engine never ends a streamed request before its final text is read (the package's
    # generate may): compared where the package read all its text too (its first token is in
    # the prompt, the rest and tts_eos one a frame). The package returns max_new_tokens - 1
    # frames when it runs to length (the last frame's codebooks 1-15 are never drawn).
    assert len(official) >= len(text), "the official generate stopped before reading the text"
    assert len(ours) >= len(official)
    np.testing.assert_array_equal(ours[: len(official)], official)


def test_the_text_column_carries_the_text_then_its_end_then_pads(model):
    request, _, _ = _streamed(model, PIECES, {"language": "auto", "instruction": ""}, 1)
    text = "".join(PIECES)
    ids = model.encode(text)
    column = [row[model.k] for row in request.output_ids]
    n = len(ids) - 1  # the first token is in the prompt's last row
    assert column[:n] == ids[1:]
    assert column[n] == model.ids.tts_eos
    assert set(column[n + 1 :]) <= {model.ids.tts_pad}
    assert request.prompt_ids[-1][0] == model.ids.bos and request.prompt_ids[-1][-1] == ids[0]


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
