"""The Starlette app: routes, lifespan, and the WebSocket handshake (auth, origin, caps).

`create_app(settings, engine=None)` builds everything; nothing happens at import. Without an
engine the lifespan loads one from the settings (and shuts it down at exit); tests and embedders
pass a running engine and keep ownership of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import parse_qsl

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket, WebSocketDisconnect

from engine.api import EngineClient, EngineStats
from gateway.audio import ChunkEncoder, make_off_loop_encoder
from gateway.auth import (
    Authenticator,
    Denial,
    Principal,
    SessionSlots,
    select_subprotocol,
)
from gateway.client_voices import ClientVoices
from gateway.codec_workers import (
    GPU_DEFAULT_DECODE_PROCESSES,
    MIC_DECODERS,
    CodecWorkers,
    PooledDecoder,
    process_count,
)
from gateway.config import GatewaySettings
from gateway.input_transcription import InputTranscriber
from gateway.loop_lag import probe_loop_lag
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.protocol import AudioSpec, ErrorEvent
from gateway.realtime import RealtimeWire, dialect_of
from gateway.replica_pool import ReplicaPool, replica_counts
from gateway.session import Session
from gateway.speech_http import SpeechEndpoint
from gateway.supervisor import RestartPolicy, SupervisedEngine
from gateway.twilio import TwilioWire
from gateway.twilio_protocol import ConnectStream, encode_twiml
from gateway.twilio_signature import SIGNATURE_HEADER, is_valid_twilio_signature, public_url
from gateway.unmatched_http import UnmatchedHttp, method_not_allowed_handler
from gateway.voices_http import VoicesEndpoint
from gateway.wire import Wire

log = logging.getLogger("voxgate.gateway")
# The WebSocket endpoints, as a refused socket to any other path names them.
SOCKET_PATHS = ("/v1/stream", "/v1/realtime", "/v1/twilio")

# Query parameters of the TwiML route that are passed on to the stream (gateway.twilio).
_TWIML_PARAMETERS = ("greeting", "voice", "temperature", "top_p", "seed", "max_tokens", "speed")

_NO_DEMO = """<!doctype html><meta charset="utf-8"><title>Voxgate</title>
<h1>Voxgate</h1><p>The gateway is running; the web demo folder was not found at {path}.</p>
<p>WebSocket endpoints: <code>/v1/stream</code>, <code>/v1/realtime</code> (OpenAI Realtime), <code>/v1/twilio</code> ·
HTTP: <code>POST /v1/audio/speech</code> (OpenAI speech), <code>/v1/voices</code> · <a href="/health">/health</a> ·
<a href="/ready">/ready</a> · <a href="/metrics">/metrics</a></p>"""


class Gateway:
    """What the routes share: settings, the engine (once loaded), auth, slots, metrics."""

    def __init__(self, settings: GatewaySettings, engine: EngineClient | None) -> None:
        self.settings = settings
        self.engine = engine
        self.auth = Authenticator(settings.api_keys, settings.allowed_origins)
        self.slots = SessionSlots(settings.max_sessions, settings.max_sessions_per_key)
        self.metrics = GatewayMetrics(self.engine_stats)
        self.metrics.watch_slots(self.slots)
        self.encode_workers: CodecWorkers | None = None  # the lifespan starts them, if asked
        self.mic_workers: CodecWorkers | None = None  # likewise, the microphones' decoders
        # Voices clients add from clips, per key, held by the gateway's engine (with replicas
        # the pool, which gives each to every replica). Not with several gateway processes:
        # each keeps its own list, and a client's next connection may reach another
        # (docs/scale-out.md, "Limits").
        voice_settings = (
            dataclasses.replace(settings, client_voices_per_key=0)
            if settings.gateway_processes > 1
            else settings
        )
        self.client_voices = ClientVoices(voice_settings, home=lambda: self.engine)
        self.sessions: set[Session] = set()  # the WebSocket sessions open now
        # Transcribes spoken turns (--input-transcription-model); the lifespan loads it.
        self.transcriber: InputTranscriber | None = None
        self.engine_shut_down = False  # by the lifespan, when it owns the engine

    def open_encoder(self, spec: AudioSpec, source_rate: int) -> ChunkEncoder:
        """A response's output encoder (gateway.audio.OpenEncoder): on this process's worker
        threads, or in the encoder processes with --encode-processes."""
        opened = self.encode_workers.open if self.encode_workers else make_off_loop_encoder
        hurry_ms = self.settings.opus_hurry_ms
        return opened(
            spec,
            source_rate,
            self.settings.opus_bitrate,
            self.metrics.observe_encode,
            hurry_ms / 1000 if hurry_ms else None,
        )

    def open_mic_decoder(self, rate: int) -> PooledDecoder | None:
        """A full-duplex session's Opus decoder to `rate` Hz in the decoder processes
        (gateway.duplex.OpenMicDecoder), or None where none run: the session decodes on the
        event loop."""
        if self.mic_workers is None:
            return None
        return self.mic_workers.open_decoder(rate)

    def engine_stats(self) -> EngineStats | None:
        return self.engine.stats() if self.engine is not None else None

    @property
    def draining(self) -> bool:
        """The server is stopping (drain): not ready, its session slots closed to newcomers."""
        return self.slots.closed

    @property
    def ready(self) -> bool:
        return not self.draining and self.engine is not None and self.engine.ready

    async def drain(self, timeout_s: float) -> None:
        """Stop gracefully: /ready turns 503 and new sessions are refused (1013) at once; the
        responses in flight get up to `timeout_s` to finish; then every session still open is
        closed with 1001 (going away), each given close_timeout_s to say goodbye."""
        self.slots.closed = True  # new sessions and speech requests are refused from now
        busy = sum(session.busy for session in self.sessions)
        log.info(
            "stopping: %d sessions open, %d with a response in flight; waiting up to %g s",
            len(self.sessions),
            busy,
            timeout_s,
        )
        await _wait_until(lambda: not any(s.busy for s in self.sessions), timeout_s)
        for session in list(self.sessions):
            session.go_away()
        await _wait_until(lambda: not self.sessions, self.settings.close_timeout_s + 1)

    # --- routes ----------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """Liveness: fails only when the server cannot recover on its own (the supervisor gave
        up on an engine that kept dying); an engine being restarted is not a liveness failure."""
        engine = self.engine
        if isinstance(engine, SupervisedEngine) and not engine.healthy:
            reason = engine.record.last_reason
            return JSONResponse({"status": "unhealthy", "reason": reason}, status_code=503)
        if isinstance(engine, ReplicaPool) and not engine.healthy:
            reason = "every engine replica kept dying; the supervisors gave up"
            return JSONResponse({"status": "unhealthy", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def ready_route(self, request: Request) -> Response:
        """Readiness: the engine serves now."""
        pool = self.engine if isinstance(self.engine, ReplicaPool) else None
        extra = {"replicas": replica_counts(pool)} if pool is not None else {}
        if self.ready:
            return JSONResponse({"status": "ready", "model": self.engine.facts.name, **extra})
        if self.draining:
            return JSONResponse({"status": "stopping", **extra}, status_code=503)
        restarting = isinstance(self.engine, SupervisedEngine | ReplicaPool) and (
            self.engine.restarting
        )
        status = "restarting" if restarting else "not ready"
        return JSONResponse({"status": status, **extra}, status_code=503)

    async def metrics_route(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def stream(self, ws: WebSocket) -> None:
        """`/v1/stream`: the native protocol (docs/protocol.md)."""
        await self._serve(ws, self._native_wire)

    async def realtime(self, ws: WebSocket) -> None:
        """`/v1/realtime`: the OpenAI Realtime API, on the same session layer."""
        await self._serve(ws, self._realtime_wire)

    async def twilio(self, ws: WebSocket) -> None:
        """`/v1/twilio`: Twilio Media Streams (bidirectional), on the same session layer. With a
        Twilio auth token configured, Twilio's signature replaces the API key."""
        signed = None
        if self.settings.twilio_auth_token:
            url = self._twilio_url(ws.url.scheme, ws.url.netloc, ws.url.path, ws.url.query, ws=True)
            signature = ws.headers.get(SIGNATURE_HEADER)
            if not is_valid_twilio_signature(self.settings.twilio_auth_token, signature, url):
                await self._deny(ws, Denial(403, "invalid or missing X-Twilio-Signature"))
                return
            signed = Principal(key_id="twilio")
        await self._serve(ws, lambda ws, engine: TwilioWire(engine.facts), principal=signed)

    def _twilio_url(self, scheme: str, netloc: str, path: str, query: str, ws: bool = False) -> str:
        """The URL as Twilio called it: `--twilio-public-url` (its https base) when a proxy
        stands in front; the WebSocket was called on the same host with wss."""
        base = self.settings.twilio_public_url
        if base and ws:
            base = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        return public_url(scheme, netloc, path, query, base)

    async def twiml(self, request: Request) -> Response:
        """The TwiML that connects a call to `/v1/twilio` (point a number's voice webhook here).
        `greeting`, `voice` and sampling fields in the query string become stream parameters."""
        if self.settings.twilio_auth_token:
            # Twilio posts application/x-www-form-urlencoded; parsed here rather than through
            # Starlette's form parser, which needs the python-multipart package.
            body = (
                (await request.body()).decode("utf-8", "replace")
                if request.method == "POST"
                else ""
            )
            form = dict(parse_qsl(body, keep_blank_values=True))
            url = self._twilio_url(
                request.url.scheme, request.url.netloc, request.url.path, request.url.query
            )
            signature = request.headers.get(SIGNATURE_HEADER)
            if not is_valid_twilio_signature(self.settings.twilio_auth_token, signature, url, form):
                self.metrics.handshakes_refused.labels("403").inc()
                return PlainTextResponse("invalid or missing X-Twilio-Signature", status_code=403)
        secure = (
            request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
        )
        if self.settings.twilio_public_url:
            url = self._twilio_url("", "", "/v1/twilio", "", ws=True)
        else:
            url = f"{'wss' if secure else 'ws'}://{request.url.netloc}/v1/twilio"
        params = {k: v for k, v in request.query_params.items() if k in _TWIML_PARAMETERS}
        return Response(encode_twiml(ConnectStream(url, params)), media_type="application/xml")

    @staticmethod
    def _native_wire(ws: WebSocket, engine: EngineClient) -> Wire:
        wire = Wire()
        wire.subprotocol = select_subprotocol(ws.scope.get("subprotocols", []))
        return wire

    def _realtime_wire(self, ws: WebSocket, engine: EngineClient) -> Wire:
        offered = ws.scope.get("subprotocols", [])
        dialect = dialect_of(ws.headers, offered)
        model = ws.query_params.get("model")
        settings = self.settings
        return RealtimeWire(
            dialect,
            engine.facts,
            model,
            offered,
            max_pending_chars=settings.max_response_text_chars,
            max_frame_bytes=settings.max_frame_bytes,
            max_text_chars=settings.max_text_chars,
            transcription=settings.input_transcription_model,
        )

    async def _serve(self, ws: WebSocket, make_wire, principal: Principal | None = None) -> None:
        """Every WebSocket endpoint: the same auth, slots, metrics and session layer; only the
        wire (how events look on the socket) differs. `principal`: already authenticated by the
        endpoint itself (Twilio's signature)."""
        verdict = principal or self.auth.check(ws.headers, ws.scope.get("subprotocols", []))
        if isinstance(verdict, Denial):
            await self._deny(ws, verdict)
            return
        if self.engine is None:  # only before the lifespan has loaded it
            await self._deny(ws, Denial(503, "the engine is not loaded yet"))
            return
        wire = make_wire(ws, self.engine)
        await ws.accept(subprotocol=wire.subprotocol)
        refusal = self.slots.acquire(verdict)
        if refusal is not None:
            self.metrics.count_refused(refusal)
            log.info("session refused key=%s: %s", verdict.label, refusal.message)
            try:
                for item in wire.encode_event(ErrorEvent(refusal.code, refusal.message, True)):
                    await ws.send_text(item.text)
                await ws.close(refusal.close_code, refusal.code.value)
            except (WebSocketDisconnect, OSError):
                pass  # the client left first; nothing was allocated for it
            return
        try:
            with self._placed() as engine:
                await self._run_session(ws, engine, verdict, wire)
        finally:
            self.slots.release(verdict)

    def _placed(self) -> contextlib.AbstractContextManager[EngineClient]:
        """The engine a new session talks to for its life: with replicas, the one placed for it
        now (gateway/placement.py); else the engine."""
        if isinstance(self.engine, ReplicaPool):
            return self.engine.place()
        return contextlib.nullcontext(self.engine)

    async def _run_session(
        self, ws: WebSocket, engine: EngineClient, verdict: Principal, wire: Wire
    ) -> None:
        session = Session(
            ws,
            engine,
            self.settings,
            self.metrics,
            self.open_encoder,
            verdict.label,
            wire,
            self.client_voices,
            self.open_mic_decoder,
            self.transcriber,
        )
        self.sessions.add(session)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)

    async def no_endpoint(self, ws: WebSocket) -> None:
        """A WebSocket to a path that serves none: 404 naming the ones there are, so that a
        mistyped path is not taken for a refused key (a pre-accept close reads as 403)."""
        paths = ", ".join(SOCKET_PATHS)
        await self._deny(ws, Denial(404, f"no WebSocket endpoint at {ws.url.path}: use {paths}"))

    async def _deny(self, ws: WebSocket, denial: Denial) -> None:
        self.metrics.handshakes_refused.labels(str(denial.status)).inc()
        log.info("handshake refused status=%d: %s", denial.status, denial.message)
        if "websocket.http.response" in ws.scope.get("extensions", {}):
            await ws.send_denial_response(
                PlainTextResponse(denial.message, status_code=denial.status)
            )
        else:  # servers without the denial extension answer a pre-accept close with 403
            await ws.close()


async def _wait_until(done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _web_demo(settings: GatewaySettings) -> ASGIApp | None:
    """The web demo's files, served for any path no route matches; None without the folder."""
    folder = settings.web_demo_dir
    if (folder / "index.html").is_file():
        return StaticFiles(directory=folder, html=True)
    return None


def _no_demo_route(settings: GatewaySettings) -> Route:
    """Without the web demo, "/" says where it was looked for and what the server serves."""
    note = _NO_DEMO.format(path=settings.web_demo_dir)

    async def no_demo(request: Request) -> Response:
        return HTMLResponse(note)

    return Route("/", no_demo)


def create_app(
    settings: GatewaySettings,
    engine: EngineClient | SupervisedEngine | None = None,
    restart_policy: RestartPolicy | None = None,
    owns_engine: bool = False,
    transcriber: InputTranscriber | None = None,
) -> Starlette:
    """The app. Without `engine`, the lifespan builds a supervised one from the settings
    (restarted by `restart_policy` when it dies), or with `settings.replicas` a pool of
    supervised Ray replicas; a given engine is the caller's to own unless `owns_engine` (then
    the lifespan shuts it down, as `voxgate serve` wants), and is supervised only if it is a
    SupervisedEngine or a ReplicaPool."""
    gateway = Gateway(settings, engine)
    gateway.transcriber = transcriber  # else the lifespan loads settings' (and closes it)
    builds_engine = engine is None
    owns_engine = owns_engine or builds_engine

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.input_transcription_model and gateway.transcriber is None:
            gateway.transcriber = await asyncio.to_thread(
                InputTranscriber, settings.input_transcription_model
            )
        if builds_engine and settings.replicas:
            from gateway.ray_cluster import build_replica_pool  # imports Ray

            gateway.engine = await asyncio.to_thread(build_replica_pool, settings, restart_policy)
        elif builds_engine:
            # A dead engine is rebuilt from the settings, as at start-up (gateway.supervisor).
            gateway.engine = await SupervisedEngine.start(
                lambda: build_engine_for(settings), restart_policy
            )
        watched = (
            gateway.engine if isinstance(gateway.engine, SupervisedEngine | ReplicaPool) else None
        )
        if watched is not None:
            watched.watch()  # on this loop, for as long as the app serves
        if watched is not None:  # a pool's: its replicas' supervision as one (voxgate_engine_*)
            gateway.metrics.watch_supervisor(watched)
        if isinstance(watched, ReplicaPool):
            gateway.metrics.watch_replicas(watched)
        processes = process_count(settings.encode_processes, settings.engine.device)
        if processes:
            workers = CodecWorkers(processes)
            gateway.encode_workers = await asyncio.to_thread(workers.start)
            gateway.metrics.watch_codec_workers(gateway.encode_workers)
        decoders = process_count(
            settings.decode_processes, settings.engine.device, GPU_DEFAULT_DECODE_PROCESSES
        )
        if decoders:
            gateway.mic_workers = await asyncio.to_thread(
                CodecWorkers(decoders, role=MIC_DECODERS).start
            )
            gateway.metrics.watch_codec_workers(gateway.mic_workers)
        probe = asyncio.create_task(probe_loop_lag(gateway.metrics.loop_lag))
        try:
            yield
        finally:
            probe.cancel()
            if gateway.transcriber is not None:
                gateway.transcriber.close()
            for workers in (gateway.encode_workers, gateway.mic_workers):
                if workers is not None:
                    await asyncio.to_thread(workers.close)
            if watched is not None:
                await watched.stop_watching()
            if owns_engine and gateway.engine is not None:
                await gateway.engine.shutdown()
                gateway.engine_shut_down = True

    voices = VoicesEndpoint(gateway)
    web_demo = _web_demo(settings)
    routes = [
        Route("/health", gateway.health),
        Route("/ready", gateway.ready_route),
        Route("/metrics", gateway.metrics_route),
        WebSocketRoute("/v1/stream", gateway.stream),
        WebSocketRoute("/v1/realtime", gateway.realtime),
        WebSocketRoute("/v1/twilio", gateway.twilio),
        WebSocketRoute("/{path:path}", gateway.no_endpoint),  # after every socket endpoint
        Route("/v1/twilio/twiml", gateway.twiml, methods=["GET", "POST"]),
        Route("/v1/audio/speech", SpeechEndpoint(gateway).create, methods=["POST"]),
        Route("/v1/voices", voices.list, methods=["GET"]),
        Route("/v1/voices", voices.add, methods=["POST"]),
        Route("/v1/voices/{name}", voices.delete, methods=["DELETE"]),
        *([] if web_demo else [_no_demo_route(settings)]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={405: method_not_allowed_handler(routes)},
    )
    # Paths no route matches: a JSON 404 under /v1/, else the demo (gateway.unmatched_http).
    app.router.default = UnmatchedHttp(routes, web_demo)
    app.state.gateway = gateway
    return app


def build_engine_for(settings: GatewaySettings) -> EngineClient:
    """A started, warmed-up engine for the settings (the supervisor's factory)."""
    from engine.factory import build_engine
    from models.registry import DEFAULT_MODEL

    return build_engine(
        settings.model or DEFAULT_MODEL,
        settings.codec,
        settings.engine,
        progress=True,
        random_weights=settings.random_weights,
        voices_dir=settings.voices_dir,
    )


def uvicorn_config(app: Starlette, settings: GatewaySettings, **overrides) -> uvicorn.Config:
    """The one place the server's transport options are set (the CLI and the tests use it)."""
    options = dict(
        host=settings.host,
        port=settings.port,
        ws_max_size=settings.ws_max_size,
        # Opus does not deflate; compression would only cost CPU on every frame.
        ws_per_message_deflate=False,
        log_level="info",
        lifespan="on",
    )
    options.update(overrides)
    return uvicorn.Config(app, **options)
