"""`GET /v1/voices`: the served model's voices, so a client can offer a picker.

    {"model": "orpheus-3b", "default_voice": "tara",
     "voices": [{"name": "tara", "source": "preset"}, ...], "cloning": false}

`source` is "preset" for the model's own voices and "voices_dir" for those the server made
from reference clips (--voices-dir); `cloning` says whether the model can make voices from
clips at all. Every listed voice is accepted as `voice` by /v1/stream's session.start and by
POST /v1/audio/speech (both check against the same ModelFacts.voices). Same auth as the
other routes; errors in OpenAI's shape, as /v1/audio/speech's.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from engine.api import ModelFacts
from gateway.speech_http import error_response
from gateway.speech_request import SpeechHttpError, authorize


def voices_body(facts: ModelFacts) -> dict:
    clips = set(facts.clip_voices)
    return {
        "model": facts.name,
        "default_voice": facts.default_voice,
        "voices": [
            {"name": name, "source": "voices_dir" if name in clips else "preset"}
            for name in facts.voices
        ],
        "cloning": facts.voice_cloning,
    }


class VoicesEndpoint:
    """The route's handler; `gateway` is gateway.app.Gateway (engine, auth, metrics)."""

    def __init__(self, gateway) -> None:
        self._gateway = gateway

    async def list(self, request: Request) -> JSONResponse:
        try:
            authorize(self._gateway, request.headers)
        except SpeechHttpError as error:
            return error_response(error)
        engine = self._gateway.engine
        return JSONResponse(voices_body(engine.facts))
