"""`POST /v1/audio/speech`: OpenAI's speech endpoint, on the gateway's engine, admission and
auth.

    auth (Bearer key, as the WebSockets) ─▶ body checked (gateway/speech_request.py)
      ─▶ a session slot (429 per key, 503 server-wide) and the engine's admission (503)
      ─▶ ResponseRunner (gateway/response.py: sentence segments, engine requests, the reply
         lifecycle), unpaced: 24 kHz PCM16 frames as the engine makes them
      ─▶ the response format's writer (gateway/speech_formats.py), off the event loop
      ─▶ the body: the file's bytes as they come (`stream_format: audio`), or SSE events
         `speech.audio.delta` (base64 of those bytes) then `speech.audio.done` (`sse`)

The HTTP status is chosen once the first audio (or the reply's end) is there, so a request
the engine refuses still gets its 4xx/5xx in OpenAI's error shape, with Retry-After for
429/503. A failure after audio has gone out ends an SSE body with an `error` event, and an
`audio` body by breaking the connection (the client sees a cut-off transfer, not a short file).
A client that disconnects cancels the request's engine requests at once: the response watches
for `http.disconnect` while it streams.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from engine.api import EngineDead
from gateway import client_json
from gateway.admission import admission_refusal
from gateway.auth import Principal
from gateway.http_common import (
    RETRY_AFTER_S,
    HttpError,
    authorize,
    bad,
    error_response,
    unavailable,
)
from gateway.protocol import ErrorCode, ErrorEvent, ServerEvent
from gateway.reply import Emitter
from gateway.response import Response as TextResponse
from gateway.response import ResponseRunner
from gateway.segmenter import SentenceSegmenter
from gateway.speech_formats import available_formats, open_writer
from gateway.speech_request import SpeechCall, parse_speech_request
from gateway.tasks import cancel_and_wait

log = logging.getLogger("voxgate.gateway")
IGNORED_HEADER = "Voxgate-Ignored-Fields"

# How an engine refusal before any audio is answered: (HTTP status, OpenAI error type).
_STATUS_OF: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.OVERLOADED: (503, "server_error"),
    ErrorCode.RATE_LIMITED: (429, "rate_limit_error"),
    ErrorCode.BAD_FIELD: (400, "invalid_request_error"),
}


class SpeechStream:
    """One request's audio: the runner's PCM frames → the format's bytes, and the cleanup
    (engine requests cancelled, the session slot given back) however it ends."""

    def __init__(self, gateway, call: SpeechCall, principal: Principal) -> None:
        settings = gateway.settings
        self.call = call
        self.response_id = f"speech_{uuid.uuid4().hex[:16]}"
        self._gateway, self._principal = gateway, principal
        self._frames: asyncio.Queue[bytes | None] = asyncio.Queue()  # None: the reply ended
        self.errors: list[ErrorEvent] = []
        text = TextResponse(
            self.response_id,
            SentenceSegmenter(settings.min_segment_chars, settings.max_segment_chars),
        )
        text.add_text(call.text, final=True)
        self.runner = ResponseRunner(
            text,
            gateway.engine,
            settings,
            call.options,
            Emitter(self._event, self._audio),
            gateway.metrics,
            gateway.open_encoder,
            logging.LoggerAdapter(log, {"response_id": self.response_id}),
            paced=False,
        )
        self._task: asyncio.Task | None = None
        self._first: bytes | None = None
        self._closed = False

    def _event(self, event: ServerEvent) -> None:
        if isinstance(event, ErrorEvent):
            self.errors.append(event)
            self._gateway.metrics.errors.labels(event.code.value).inc()

    def _audio(self, frame: bytes, duration_ms: int) -> None:
        self._frames.put_nowait(frame)

    async def _run(self) -> None:
        try:
            await self.runner.run()
        except EngineDead as exc:  # the engine loop stopped: nothing can be served
            self._event(ErrorEvent(ErrorCode.OVERLOADED, f"{exc}; try again later"))
        except Exception:  # noqa: BLE001 - a bug must fail this request, not hang it
            log.exception("speech %s failed", self.response_id)
            self._event(ErrorEvent(ErrorCode.INTERNAL, "internal error"))
        finally:
            self._frames.put_nowait(None)

    async def start(self) -> HttpError | None:
        """Start generating and wait for the first audio; the error to answer instead when
        the reply ended without any (the engine refused it, or it failed)."""
        self._task = asyncio.create_task(self._run(), name=self.response_id)
        self._first = await self._frames.get()
        if self._first is not None or not self.errors:
            return None
        first = self.errors[0]
        status, kind = _STATUS_OF.get(first.code, (500, "server_error"))
        retry = RETRY_AFTER_S if status in (429, 503) else None
        return HttpError(status, first.message, kind=kind, retry_after_s=retry)

    async def file_bytes(self) -> AsyncIterator[bytes]:
        """The response file, a piece at a time: every frame waiting is written at once, off
        the event loop (encoders and muxers take milliseconds a second of audio)."""
        writer = open_writer(self.call.format)
        frame, ended = self._first, False
        while not ended:
            batch = []
            while frame is not None:
                batch.append(frame)
                if self._frames.empty():
                    break
                frame = self._frames.get_nowait()
            ended = frame is None
            if batch:
                data = await asyncio.to_thread(writer.write, b"".join(batch))
                if data:
                    yield data
            if not ended:
                frame = await self._frames.get()
        if self.failed:  # cut short: no file trailer, the caller reports the failure
            return
        data = await asyncio.to_thread(writer.close)
        if data:
            yield data

    @property
    def failed(self) -> str | None:
        """Why the reply failed after starting, or None."""
        if self.errors:
            return self.errors[0].message
        return None

    @property
    def generated_tokens(self) -> int:
        return self.runner.reply.generated_tokens

    async def close(self) -> None:
        """Cancel what still generates and give the slot back (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            await cancel_and_wait(self._task)
        finally:
            self._gateway.slots.release(self._principal)


class SpeechResponse(Response):
    """The streamed body. Runs the stream and a watch for the client's disconnect together:
    the first to end ends the other, and the stream is closed either way."""

    def __init__(self, stream: SpeechStream) -> None:
        call = stream.call
        media = "text/event-stream" if call.stream_format == "sse" else call.format.content_type
        headers = {IGNORED_HEADER: ", ".join(call.ignored)} if call.ignored else {}
        if call.stream_format == "sse":
            headers["Cache-Control"] = "no-cache"
        # As StreamingResponse: no body yet, so no Content-Length (the body is chunked).
        self.status_code = 200
        self.media_type = media
        self.background = None
        self.init_headers(headers)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.create_task(disconnected())
        sender = asyncio.create_task(self._send_body(send))
        try:
            await asyncio.wait({watcher, sender}, return_when=asyncio.FIRST_COMPLETED)
            if sender.done():
                # OSError: the client left while we wrote; there is nothing more to tell it.
                with contextlib.suppress(OSError):
                    sender.result()
            else:
                log.info("speech %s: the client disconnected", self.stream.response_id)
        finally:
            for task in (watcher, sender):
                task.cancel()
            await asyncio.gather(watcher, sender, return_exceptions=True)
            await self.stream.close()

    async def _send_body(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        sse = self.stream.call.stream_format == "sse"
        async for data in self.stream.file_bytes():
            if sse:
                data = _sse(
                    {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                )
            await send({"type": "http.response.body", "body": data, "more_body": True})
        failed = self.stream.failed
        if failed is not None:
            log.warning(
                "speech %s failed after its first audio: %s", self.stream.response_id, failed
            )
            if not sse:
                # An audio body has no way to say it failed: it ends without its last chunk,
                # which the server answers by closing the connection (one log line), so the
                # client sees a cut-off transfer, never a short file that looks whole.
                return
            end = _sse({"type": "error", "error": {"message": failed, "type": "server_error"}})
        elif sse:
            tokens = self.stream.generated_tokens
            usage = {"input_tokens": 0, "output_tokens": tokens, "total_tokens": tokens}
            end = _sse({"type": "speech.audio.done", "usage": usage})
        else:
            end = b""
        await send({"type": "http.response.body", "body": end, "more_body": False})


def _sse(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


async def _read_body(request: Request, limit: int) -> object:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HttpError(413, f"the request body is over {limit} bytes", None)
    try:
        return client_json.loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, or a lone surrogate
        raise bad(None, f"the body is not valid JSON: {exc}", None) from None


class SpeechEndpoint:
    """The route's handler; `gateway` is gateway.app.Gateway (settings, engine, auth, slots,
    metrics, encoders)."""

    def __init__(self, gateway) -> None:
        self._gateway = gateway
        self._formats = available_formats()

    async def create(self, request: Request) -> Response:
        try:
            return await self._create(request)
        except HttpError as error:
            return error_response(error)

    async def _create(self, request: Request) -> Response:
        gateway = self._gateway
        verdict = authorize(gateway, request.headers)
        engine = gateway.engine
        body = await _read_body(request, gateway.settings.max_message_bytes)
        # The model's voices and the ones this key added from clips (gateway/client_voices.py).
        facts = gateway.client_voices.facts_for(engine, verdict.label)
        call = parse_speech_request(body, facts, gateway.settings, self._formats)
        gateway.client_voices.touch(verdict.label, call.options.voice)
        refusal = gateway.slots.acquire(verdict)
        if refusal is not None:
            gateway.metrics.count_refused(refusal)
            if refusal.code is ErrorCode.RATE_LIMITED:
                raise unavailable(refusal.message, 429, "rate_limit_error")
            raise unavailable(refusal.message)
        stream = SpeechStream(gateway, call, verdict)
        try:
            busy = admission_refusal(engine, gateway.settings, call.options.realtime)
            if busy is not None:
                gateway.metrics.count_refused(busy)
                raise unavailable(busy.message)
            error = await stream.start()
        except BaseException:
            await stream.close()
            raise
        if error is not None:
            await stream.close()
            raise error
        return SpeechResponse(stream)
