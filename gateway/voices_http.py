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
from gateway.auth import Denial
from gateway.speech_http import RETRY_AFTER_S, error_response
from gateway.speech_request import SpeechHttpError


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
        gateway = self._gateway
        verdict = gateway.auth.check(request.headers, [])
        if isinstance(verdict, Denial):
            gateway.metrics.handshakes_refused.labels(str(verdict.status)).inc()
            kind = "authentication_error" if verdict.status == 401 else "permission_error"
            code = "invalid_api_key" if verdict.status in (401, 403) else None
            return error_response(
                SpeechHttpError(verdict.status, verdict.message, kind=kind, code=code)
            )
        engine = gateway.engine
        if engine is None or not engine.ready:
            message = "the engine is not ready; try again later"
            return error_response(
                SpeechHttpError(503, message, kind="server_error", retry_after_s=RETRY_AFTER_S)
            )
        return JSONResponse(voices_body(engine.facts))
