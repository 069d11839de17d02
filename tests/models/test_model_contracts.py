"""The contracts SpeechModel declares beyond its four stages (models/base.py): the turn methods
refuse on a model that is not turn-based, the engine batches spoken turns only for a model that
overrides user_audio_turns, and Moshi offers DuplexModel's methods to the duplex loop."""

from __future__ import annotations

import numpy as np
import pytest

from engine.api import TurnFromSpeech
from engine.loop import prepare_speech_turns
from models.base import DuplexModel, ModelFacts, ModelInputError, SpeechModel


class _Turns(SpeechModel):
    """The least SpeechModel that takes turns: each turn is its audio's length."""

    def __init__(self, accepts_turns: bool = True) -> None:
        self.facts = ModelFacts(
            name="turns",
            sample_rate=16000,
            token_rate_hz=12.5,
            stop_token_ids=(0,),
            first_chunk_tokens=1,
            chunk_tokens=1,
            accepts_turns=accepts_turns,
        )
        self.calls: list[str] = []

    def user_audio_turn(self, pcm_16k, system=None):
        self.calls.append("one")
        return len(pcm_16k)

    preprocess = forward = compute_logits = new_stream_state = detokenize = None  # unused


class _Batched(_Turns):
    def user_audio_turns(self, pcms_16k, systems):
        self.calls.append("batch")
        return [len(p) for p in pcms_16k]


def _turns(*lengths: int) -> list[TurnFromSpeech]:
    return [TurnFromSpeech(np.zeros(n, np.float32)) for n in lengths]


def test_spoken_turns_are_batched_only_for_a_model_that_overrides_user_audio_turns():
    one_by_one, batched = _Turns(), _Batched()
    assert not one_by_one.has_batched_audio_turns() and batched.has_batched_audio_turns()
    assert prepare_speech_turns(one_by_one, _turns(3, 5)) == [3, 5]
    assert one_by_one.calls == ["one", "one"]
    assert prepare_speech_turns(batched, _turns(3, 5)) == [3, 5]
    assert batched.calls == ["batch"]


def test_a_model_that_is_not_turn_based_refuses_every_turn_method():
    model = _Turns(accepts_turns=False)
    for call in (
        lambda: SpeechModel.user_audio_turn(model, np.zeros(4, np.float32)),
        lambda: model.user_text_turn("hello"),
        lambda: model.heard_reply([1, 2], None),
        lambda: model.tools_turn([]),
        lambda: model.tool_output_turn(["{}"]),
        lambda: model.tool_call_turn("f", "{}"),
    ):
        with pytest.raises(ModelInputError):
            call()


def test_moshi_offers_the_duplex_loops_methods():
    from models.moshi.model import MoshiModel

    for name in ("new_input_state", "encode_input", "next_input_row", "text_piece"):
        assert name in DuplexModel.__dict__ and callable(getattr(MoshiModel, name)), name
    assert "samples_per_frame" in DuplexModel.__annotations__
