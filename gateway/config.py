"""Typed, validated gateway settings. Every bad value is refused here, with a message saying
what would be accepted, before a socket is opened."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import EngineConfig
from engine.request import ConfigError
from gateway.protocol import Limits

API_KEYS_ENV = "VOXGATE_API_KEYS"
# A key may travel as the subprotocol `bearer.<key>`, so it must be an HTTP token (RFC 9110
# tchar) or the browser refuses to send it.
_KEY_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ORIGIN_RE = re.compile(r"^(https?)://[A-Za-z0-9.-]+(:[0-9]{1,5})?$")
_WEB_DEMO = Path(__file__).resolve().parents[1] / "web_demo"


def normalize_origin(origin: str) -> str:
    """Origins compare case-insensitively and without a trailing slash."""
    return origin.strip().rstrip("/").lower()


def keys_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """API keys from VOXGATE_API_KEYS: comma- or whitespace-separated."""
    raw = (environ if environ is not None else os.environ).get(API_KEYS_ENV, "")
    return tuple(k for k in re.split(r"[,\s]+", raw) if k)


@dataclass(frozen=True)
class GatewaySettings:
    # --- the engine behind the gateway ---
    model: str | None = None  # None: the engine's default preset
    codec: str | None = None
    random_weights: bool = False
    voices_dir: str | None = None  # reference clips for voice prompting (CSM models)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # --- network ---
    host: str = "127.0.0.1"
    port: int = 8000
    # --- auth and admission ---
    api_keys: tuple[str, ...] = ()  # empty: no auth
    allowed_origins: tuple[str, ...] = ()  # empty: any Origin
    max_sessions_per_key: int = 16  # 0: no cap (only with api_keys)
    # Twilio's account auth token: when set, /v1/twilio and its TwiML route accept exactly the
    # requests Twilio signed (X-Twilio-Signature) instead of API keys, which Twilio cannot send.
    twilio_auth_token: str | None = field(default=None, repr=False)
    # The https base Twilio calls (e.g. https://voice.example.com) when a proxy in front of the
    # server changes scheme or host; signatures cover the URL as Twilio saw it.
    twilio_public_url: str | None = None
    max_sessions: int = 512  # server-wide open sessions; beyond: overloaded, close 1013
    # Refuse new sessions (1013) while this many engine requests already wait for a first step.
    max_engine_waiting: int = 64
    # --- pacing and backpressure ---
    lead_ms: int = 1000  # audio may run this far ahead of the client's playback clock
    max_send_queue_ms: int = 5000  # paced audio the socket has not taken yet; beyond: 1008
    max_send_queue_events: int = 256  # the same bound for JSON events
    # --- size limits ---
    max_text_chars: int = 4096  # one `text` event
    max_response_text_chars: int = 32768  # all text of one response
    max_frame_bytes: int = 16384  # one binary frame (soft: error too_large)
    max_message_bytes: int = 262144  # any one frame (hard: close 1009)
    max_queued_responses: int = 4  # responses waiting behind the one playing
    # --- timeouts ---
    start_timeout_s: float = 10.0
    idle_timeout_s: float = 300.0
    close_timeout_s: float = 5.0
    # --- streamed text → engine requests ---
    min_segment_chars: int = 20
    max_segment_chars: int = 300
    segment_pipeline_depth: int = 2  # segments of one response generating at once
    # --- audio ---
    opus_bitrate: int = 32000
    # Output encoding on worker threads of the gateway's process (0) or in this many processes
    # of its own (gateway/encode_workers.py: out of reach of the gateway's GIL). None: 4 when
    # the engine runs on a CUDA GPU, else 0 (encode_workers.process_count).
    encode_processes: int | None = None
    web_demo_dir: Path = _WEB_DEMO

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {self.port}")
        for key in self.api_keys:
            if not _KEY_RE.match(key):
                raise ConfigError(
                    "API keys must be non-empty and use only letters, digits and !#$%&'*+.^_`|~- "
                    "(they may travel as a WebSocket subprotocol)"
                )
        for origin in self.allowed_origins:
            if not _ORIGIN_RE.match(normalize_origin(origin)):
                raise ConfigError(
                    f"allowed origin {origin!r} must look like https://host or http://host:port"
                )
        self._check_range("max_sessions_per_key", self.max_sessions_per_key, 0)
        self._check_range("max_sessions", self.max_sessions, 1)
        self._check_range("max_engine_waiting", self.max_engine_waiting, 1)
        self._check_range("lead_ms", self.lead_ms, 0, 60_000)
        self._check_range("max_send_queue_ms", self.max_send_queue_ms, 100, 600_000)
        self._check_range("max_send_queue_events", self.max_send_queue_events, 8)
        self._check_range("max_text_chars", self.max_text_chars, 1)
        self._check_range(
            "max_response_text_chars", self.max_response_text_chars, self.max_text_chars
        )
        self._check_range("max_frame_bytes", self.max_frame_bytes, 64, self.max_message_bytes)
        self._check_range("max_message_bytes", self.max_message_bytes, 1024, 64 * 2**20)
        self._check_range("max_queued_responses", self.max_queued_responses, 0, 1000)
        self._check_range("start_timeout_s", self.start_timeout_s, 0.1, 3600)
        self._check_range("idle_timeout_s", self.idle_timeout_s, 1, 86_400)
        self._check_range("close_timeout_s", self.close_timeout_s, 0.1, 600)
        self._check_range("min_segment_chars", self.min_segment_chars, 1, self.max_segment_chars)
        self._check_range("max_segment_chars", self.max_segment_chars, 16, 100_000)
        self._check_range("segment_pipeline_depth", self.segment_pipeline_depth, 1, 16)
        self._check_range("opus_bitrate", self.opus_bitrate, 6000, 510_000)
        if self.encode_processes is not None:
            self._check_range("encode_processes", self.encode_processes, 0, 64)

    @staticmethod
    def _check_range(name: str, value: float, low: float, high: float | None = None) -> None:
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ConfigError(f"{name} must be {bound}, got {value}")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    @property
    def origins(self) -> frozenset[str]:
        return frozenset(normalize_origin(o) for o in self.allowed_origins)

    @property
    def ws_max_size(self) -> int:
        """The transport's own cap. Above the protocol's hard limit so that a frame between the
        two still reaches the session, which answers `too_large` before closing with 1009;
        larger frames are cut off by the server library with 1009 and no event."""
        return 4 * self.max_message_bytes

    def limits(self) -> Limits:
        return Limits(
            max_text_chars=self.max_text_chars,
            max_response_text_chars=self.max_response_text_chars,
            max_frame_bytes=self.max_frame_bytes,
            max_message_bytes=self.max_message_bytes,
            max_queued_responses=self.max_queued_responses,
            start_timeout_ms=round(self.start_timeout_s * 1000),
            idle_timeout_ms=round(self.idle_timeout_s * 1000),
            lead_ms=self.lead_ms,
            max_send_queue_ms=self.max_send_queue_ms,
        )
