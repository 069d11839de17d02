"""`/v1/voices`: the voices a caller may use, and the ones it adds from clips.

`GET /v1/voices`:

    {"model": "csm-1b", "default_voice": "0", "cloning": true,
     "voices": [{"name": "0", "source": "preset"}, ...,
                {"name": "clip-3f9a...", "source": "client", "label": "me", "seconds": 4.2}]}

`source` is "preset" for the model's own voices, "voices_dir" for those the server made from
reference clips (--voices-dir) and "client" for those the caller's API key added; `cloning`
says whether the model can make voices from clips at all. Every listed voice is accepted as
`voice` by /v1/stream's session.start and by POST /v1/audio/speech, for this key.

`POST /v1/voices` (JSON; the clip file base64-encoded, as session.start's `voice_clip`):

    {"audio": "<base64 of a WAV/FLAC/MP3/Ogg/WebM/MP4 file>", "transcript": "...", "name": "me"}
    → 201 {"name": "clip-3f9a...", "source": "client", "label": "me", "seconds": 4.2}

`DELETE /v1/voices/{name}` → 204, or 404 when the caller's key has no such voice.

Same auth as the other routes; errors in OpenAI's shape, as /v1/audio/speech's, with the clip
check that failed in `code` (gateway/clip_audio.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.api import ModelFacts
from gateway import client_json
from gateway.clip_audio import ClipError
from gateway.http_common import HttpError, authorize, error_response
from gateway.protocol import ClipUpload, ProtocolError, decode_clip_upload
from gateway.voice_lru import ClientVoice

JSON_ALLOWANCE = 64 * 1024  # the body's bytes besides the base64 clip (transcript, name)


def voice_entry(voice: ClientVoice) -> dict:
    return {
        "name": voice.voice_id,
        "source": "client",
        "label": voice.label,
        "seconds": voice.seconds,
    }


def voices_body(facts: ModelFacts, added: Sequence[ClientVoice] = ()) -> dict:
    clips = set(facts.clip_voices)
    return {
        "model": facts.name,
        "default_voice": facts.default_voice,
        "voices": [
            {"name": name, "source": "voices_dir" if name in clips else "preset"}
            for name in facts.voices
        ]
        + [voice_entry(v) for v in added],
        "cloning": facts.voice_cloning,
    }


class VoicesEndpoint:
    """The routes' handlers; `gateway` is gateway.app.Gateway (engine, auth, client_voices)."""

    def __init__(self, gateway) -> None:
        self._gateway = gateway

    async def list(self, request: Request) -> JSONResponse:
        try:
            principal = authorize(self._gateway, request.headers)
        except HttpError as error:
            return error_response(error)
        engine = self._gateway.engine
        added = self._gateway.client_voices.owned(engine, principal.label)
        return JSONResponse(voices_body(engine.facts, added))

    async def add(self, request: Request) -> Response:
        gateway = self._gateway
        try:
            principal = authorize(gateway, request.headers)
            body = await _read_json(request, gateway.settings.max_clip_bytes)
            upload = _upload(body)
            voice = await gateway.client_voices.add(gateway.engine, principal.label, upload)
        except HttpError as error:
            return error_response(error)
        except ClipError as error:
            return error_response(_http_error(error))
        return JSONResponse(voice_entry(voice), status_code=201)

    async def delete(self, request: Request) -> Response:
        gateway = self._gateway
        try:
            principal = authorize(gateway, request.headers)
        except HttpError as error:
            return error_response(error)
        name = request.path_params["name"]
        if not gateway.client_voices.remove(gateway.engine, principal.label, name):
            return error_response(
                HttpError(
                    404, f"no voice {name!r} added by this key", "name", code="voice_not_found"
                )
            )
        return Response(status_code=204)


def _http_error(error: ClipError) -> HttpError:
    param = "transcript" if error.code.startswith("transcript") else "audio"
    return HttpError(error.status, error.message, param, code=error.code)


def _upload(body: object) -> ClipUpload:
    """The body's shape, as session.start's voice_clip is checked."""
    if isinstance(body, dict) and "audio" not in body:
        raise HttpError(
            400,
            "'audio' (the clip file, base64-encoded) is required",
            "audio",
            code="missing_required_parameter",
        )
    try:
        return decode_clip_upload(body, None)
    except ProtocolError as exc:
        raise HttpError(400, exc.message, exc.param, code="invalid_value") from None


async def _read_json(request: Request, max_clip_bytes: int) -> object:
    """The body, refused with 413 as soon as it is larger than a clip of `max_clip_bytes`
    can make it (Content-Length first), before any of it is decoded."""
    limit = 4 * (max_clip_bytes + 2) // 3 + JSON_ALLOWANCE  # base64 of the clip, and the rest
    declared = request.headers.get("content-length", "")
    too_large = HttpError(
        413,
        f"the request body is over {limit} bytes: clips are limited to {max_clip_bytes} bytes",
        "audio",
        code="clip_too_large",
    )
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    try:
        return client_json.loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, or a lone surrogate
        raise HttpError(400, f"the body is not valid JSON: {exc}", code="invalid_value") from None
