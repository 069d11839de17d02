"""The model side of a turn-based speech-to-speech session, as the gateway needs it.

A session keeps the conversation as the model's own turn objects (GLM-4-Voice: UserTurn /
AssistantTurn) and hands them to the engine (`SpeechRequest.turns`), which builds the prompt.
Making those turns is the model's business too — the user's audio through its speech
tokenizer, a reply cut to what the user heard — so the gateway reaches the model through this
one narrow adapter, duck-typed on the turn interface (models/glm_voice/model.py), never on a
concrete model class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_TURN_METHODS = ("user_audio_turn", "heard_reply", "preprocess_turns")


class TurnModel:
    def __init__(self, model: Any) -> None:
        self._model = model

    def user_audio_turn(self, pcm_16k: np.ndarray) -> Any:
        """A turn's audio (float32, 16 kHz) → the user's turn. Runs the speech tokenizer:
        call it off the event loop. Raises ModelInputError."""
        return self._model.user_audio_turn(pcm_16k)

    def user_text_turn(self, text: str) -> Any:
        """Typed text as the user's turn. Raises ModelInputError."""
        return self._model.user_text_turn(text)

    def heard_reply(self, output_ids: Sequence[Any], heard_s: float | None) -> Any:
        return self._model.heard_reply(output_ids, heard_s)

    def reply_ids(self, turn: Any) -> tuple[Any, ...]:
        return tuple(turn.token_ids)

    def transcript(self, output_ids: Sequence[Any]) -> str:
        """The text the reply's tokens carry (its speech tokens carry none)."""
        return self._model.reply_text(output_ids)


def turn_model_of(engine: Any) -> TurnModel | None:
    """The served model's turn interface, or None: the model is not turn-based, or it runs in
    another process (`--engine-process`), out of the gateway's reach."""
    facts = engine.facts
    if facts is None or not getattr(facts, "accepts_turns", False) or facts.full_duplex:
        return None
    core = getattr(engine, "core", None)
    model = getattr(core, "model", None)
    if model is None or not all(hasattr(model, m) for m in _TURN_METHODS):
        return None
    return TurnModel(model)
