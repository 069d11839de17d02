"""Typed, validated gateway settings. Every bad value is refused here, with a message saying
what would be accepted, before a socket is opened."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import MODEL, NETWORK, EngineConfig, check_range, cli
from engine.request import ConfigError
from gateway.protocol import Limits
from models.families import cloning_families

API_KEYS_ENV = "VOXGATE_API_KEYS"
# A key may travel as the subprotocol `bearer.<key>`, so it must be an HTTP token (RFC 9110
# tchar) or the browser refuses to send it.
_KEY_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ORIGIN_RE = re.compile(r"^(https?)://[A-Za-z0-9.-]+(:[0-9]{1,5})?$")
_NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # --ray-namespace
_WEB_DEMO = Path(__file__).resolve().parents[1] / "web_demo"


def normalize_origin(origin: str) -> str:
    """Origins compare case-insensitively and without a trailing slash."""
    return origin.strip().rstrip("/").lower()


def keys_from_env(environ: dict[str, str] | None = None) -> tuple[str, ...]:
    """API keys from VOXGATE_API_KEYS: comma- or whitespace-separated."""
    raw = (environ if environ is not None else os.environ).get(API_KEYS_ENV, "")
    return tuple(k for k in re.split(r"[,\s]+", raw) if k)


LIMITS = "streaming and limits"
SCALE_OUT = "scale-out (Ray)"


@dataclass(frozen=True)
class GatewaySettings:
    """The gateway's settings. A field with `cli(...)` metadata is also a `voxgate serve` option,
    a voxgate.toml key and a VOXGATE_* variable (gateway/settings.py); the rest are for
    embedders and tests."""

    # --- the engine behind the gateway ---
    model: str | None = field(
        default=None,
        metadata=cli(
            "--model",
            "preset name, checkpoint folder or HF repo id (default: voxgate-tiny)",
            group=MODEL,
        ),
    )
    codec: str | None = field(
        default=None,
        metadata=cli("--codec", "codec repo id or folder (default: the model's)", group=MODEL),
    )
    random_weights: bool = field(
        default=False,
        metadata=cli(
            "--random-weights",
            "a preset's real config with random weights",
            group=MODEL,
            switch=True,
        ),
    )
    voices_dir: str | None = field(
        default=None,
        metadata=cli(
            "--voices-dir",
            f"reference clips for voice prompting ({cloning_families()}): NAME.wav + NAME.txt "
            "(its transcript, for the models that need one); clients pick one with "
            "session.start voice=NAME (default: none)",
            group=MODEL,
            metavar="DIR",
        ),
    )
    engine: EngineConfig = field(default_factory=EngineConfig)
    # --- network ---
    host: str = field(
        default="127.0.0.1", metadata=cli("--host", "address to listen on", group=NETWORK)
    )
    port: int = field(default=8000, metadata=cli("--port", "port to listen on", group=NETWORK))
    # --- auth and admission ---
    api_keys: tuple[str, ...] = field(  # empty: no auth
        default=(),
        metadata=cli(
            "--api-key",
            "accept this API key (repeatable; also $VOXGATE_API_KEY, comma-separated); without "
            "any key the server is open (default: none)",
            group=NETWORK,
            metavar="KEY",
            env=API_KEYS_ENV,
            merge=True,
        ),
    )
    allowed_origins: tuple[str, ...] = field(  # empty: any Origin
        default=(),
        metadata=cli(
            "--allowed-origin",
            "browser Origin allowed to connect, e.g. https://app.example.com (repeatable); "
            "without any, every Origin is allowed (default: none)",
            group=NETWORK,
            metavar="ORIGIN",
        ),
    )
    max_sessions_per_key: int = field(
        default=16,
        metadata=cli(
            "--max-sessions-per-key", "open sessions per API key, 0 for no cap", group=NETWORK
        ),
    )
    # Twilio's account auth token: when set, /v1/twilio and its TwiML route accept exactly the
    # requests Twilio signed (X-Twilio-Signature) instead of API keys, which Twilio cannot send.
    # A secret: from $VOXGATE_TWILIO_AUTH_TOKEN only, never the command line (visible in `ps`).
    twilio_auth_token: str | None = field(default=None, repr=False)
    # The https base Twilio calls when a proxy in front of the server changes scheme or host;
    # signatures cover the URL as Twilio saw it.
    twilio_public_url: str | None = field(
        default=None,
        metadata=cli(
            "--twilio-public-url",
            "the https base Twilio calls, e.g. https://voice.example.com, when a proxy changes "
            "scheme or host (default: none)",
            group=NETWORK,
            metavar="URL",
        ),
    )
    max_sessions: int = field(  # server-wide; beyond: overloaded, close 1013
        default=512, metadata=cli("--max-sessions", "open sessions on this server", group=NETWORK)
    )
    # Refuse new sessions (1013) while this many engine requests already wait for a first step.
    max_engine_waiting: int = 64
    # --- pacing and backpressure ---
    lead_ms: int = field(
        default=1000,
        metadata=cli("--lead-ms", "how far audio may be sent ahead of playback", group=LIMITS),
    )
    max_send_queue_ms: int = field(
        default=5000,
        metadata=cli(
            "--max-send-queue-ms",
            "unread audio after which a client is closed (1008)",
            group=LIMITS,
        ),
    )
    max_send_queue_events: int = 256  # the same bound for JSON events
    # --- size limits ---
    max_text_chars: int = field(
        default=4096, metadata=cli("--max-text-chars", "characters in one text event", group=LIMITS)
    )
    max_response_text_chars: int = 32768  # all text of one response
    max_frame_bytes: int = 16384  # one binary frame (soft: error too_large)
    max_message_bytes: int = field(
        default=262144,
        metadata=cli(
            "--max-message-bytes", "bytes in any one frame; larger closes with 1009", group=LIMITS
        ),
    )
    max_queued_responses: int = 4  # responses waiting behind the one playing
    # Turn-based sessions with server VAD: a pause this long begins the reply, held back until
    # the VAD's silence confirms the end of turn (gateway/speculative_turn.py); 0: off.
    speculative_turn_ms: int = field(
        default=0,
        metadata=cli(
            "--speculative-turn-ms",
            "spoken turns (server VAD): begin the reply after this much silence, sent once the "
            "turn's silence_ms confirms its end; 0: off",
            group=LIMITS,
            metavar="MS",
        ),
    )
    # Turn-based sessions: the Whisper model (faster-whisper) that transcribes the user's spoken
    # turns when a session asks (gateway/input_transcription.py); None: not offered.
    input_transcription_model: str | None = field(
        default=None,
        metadata=cli(
            "--input-transcription-model",
            "spoken turns: transcribe them with this faster-whisper model (a name such as "
            "base.en, or a folder) when a session asks (OpenAI input_audio_transcription); "
            "needs pip install 'voxgate[transcription]'",
            group=LIMITS,
            metavar="MODEL",
        ),
    )
    # --- voices from clients (POST /v1/voices, session.start voice_clip) ---
    max_clip_bytes: int = field(
        default=2 * 2**20,
        metadata=cli(
            "--max-clip-bytes",
            "bytes of one uploaded voice clip (the encoded file, checked before decoding)",
            group=LIMITS,
        ),
    )
    client_voices_per_key: int = field(
        default=16,
        metadata=cli(
            "--client-voices-per-key",
            "voices an API key may add from clips (the least recently used goes first); "
            "0: clients cannot add voices",
            group=LIMITS,
        ),
    )
    client_voice_bytes_per_key: int = 16 * 2**20  # what one key's voices may hold in the engine
    max_client_voices: int = 1024  # all keys together
    # --- timeouts ---
    start_timeout_s: float = field(
        default=10.0,
        metadata=cli("--start-timeout", "seconds allowed until session.start", group=LIMITS),
    )
    idle_timeout_s: float = field(
        default=300.0,
        metadata=cli(
            "--idle-timeout",
            "seconds without messages or audio before a session ends",
            group=LIMITS,
        ),
    )
    close_timeout_s: float = 5.0
    drain_timeout_s: float = field(
        default=20.0,
        metadata=cli(
            "--drain-timeout",
            "seconds a stopping server (SIGTERM, Ctrl+C) gives responses in flight to finish "
            "before it closes the sessions still open with 1001",
            group=LIMITS,
        ),
    )
    # --- streamed text → engine requests ---
    min_segment_chars: int = 20
    max_segment_chars: int = 300
    segment_pipeline_depth: int = field(
        default=2,
        metadata=cli(
            "--segment-pipeline-depth",
            "sentence segments of a response generating at once",
            group=LIMITS,
        ),
    )
    # --- audio ---
    opus_bitrate: int = field(
        default=32000, metadata=cli("--opus-bitrate", "Opus bit rate, bit/s", group=LIMITS)
    )
    opus_hurry_ms: float = field(
        default=20.0,
        metadata=cli(
            "--opus-hurry-ms",
            "encode a chunk at Opus complexity 6 instead of 10 (a quarter of the CPU) when it "
            "waited this long for its encoder, as it does when the encoders fall behind; 0: "
            "never",
            group=LIMITS,
        ),
    )
    # Output encoding on worker threads of the gateway's process (0) or in this many processes
    # of its own (gateway/codec_workers.py: out of reach of the gateway's GIL).
    encode_processes: int | None = field(
        default=None,
        metadata=cli(
            "--encode-processes",
            "encode output audio in this many processes of their own, or on the gateway's worker "
            "threads (0) (default: half the host's cores, 4 to 16, when the engine runs on a "
            "CUDA GPU, else 0)",
            group=LIMITS,
        ),
    )
    # Full-duplex sessions' Opus microphones decoded in this many processes of their own, or on
    # the event loop (0) (gateway/codec_workers.py, gateway/duplex.py).
    decode_processes: int | None = field(
        default=None,
        metadata=cli(
            "--decode-processes",
            "decode full-duplex sessions' Opus microphones in this many processes of their own, "
            "or on the gateway's event loop (0) (default: 2 when the engine runs on a CUDA GPU, "
            "else 0)",
            group=LIMITS,
        ),
    )
    # --- scale-out: engine replicas as Ray actors (docs/scale-out.md) ---
    replicas: int = field(
        default=0,
        metadata=cli(
            "--replicas",
            "run this many engine replicas as Ray actors (one per GPU, or per --replica-cpus "
            "CPUs without GPUs) and place each session on the one with the most headroom; 0: "
            "one engine and no Ray (needs the ray extra: pip install 'voxgate[ray]')",
            group=SCALE_OUT,
        ),
    )
    ray_address: str | None = field(
        default=None,
        metadata=cli(
            "--ray-address",
            "join this running Ray cluster (e.g. auto, or head:6379) and place the replicas on "
            "its nodes, instead of starting a Ray runtime on this machine (default: local)",
            group=SCALE_OUT,
            metavar="ADDR",
        ),
    )
    ray_namespace: str | None = field(
        default=None,
        metadata=cli(
            "--ray-namespace",
            "Ray namespace of this server's replicas, where its --gateway-processes find them "
            "by name; servers sharing a Ray cluster each need their own (default: "
            "voxgate-<random id>, made for this server)",
            group=SCALE_OUT,
            metavar="NAME",
        ),
    )
    replica_gpus: float | None = field(
        default=None,
        metadata=cli(
            "--replica-gpus",
            "GPUs each replica takes (default: 0 with --device cpu, else 1 on a cluster "
            "(--ray-address) or on a machine with a GPU, else 0)",
            group=SCALE_OUT,
        ),
    )
    replica_cpus: float = field(
        default=1.0,
        metadata=cli(
            "--replica-cpus",
            "CPUs each replica takes; on a CPU-only cluster also its torch threads",
            group=SCALE_OUT,
        ),
    )
    gateway_processes: int = field(
        default=1,
        metadata=cli(
            "--gateway-processes",
            "with --replicas: serve from this many gateway processes on one port (SO_REUSEPORT, "
            "Linux), all sharing the replicas, so one Python event loop is not the ceiling",
            group=SCALE_OUT,
        ),
    )
    web_demo_dir: Path = _WEB_DEMO

    def __post_init__(self) -> None:
        check_range("port", self.port, 0, 65535)
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
        check_range("max_sessions_per_key", self.max_sessions_per_key, 0)
        check_range("max_sessions", self.max_sessions, 1)
        check_range("max_engine_waiting", self.max_engine_waiting, 1)
        check_range("lead_ms", self.lead_ms, 0, 60_000)
        check_range("max_send_queue_ms", self.max_send_queue_ms, 100, 600_000)
        check_range("max_send_queue_events", self.max_send_queue_events, 8)
        check_range("max_text_chars", self.max_text_chars, 1)
        check_range("max_response_text_chars", self.max_response_text_chars, self.max_text_chars)
        check_range("max_frame_bytes", self.max_frame_bytes, 64, self.max_message_bytes)
        check_range("max_message_bytes", self.max_message_bytes, 1024, 64 * 2**20)
        check_range("max_queued_responses", self.max_queued_responses, 0, 1000)
        check_range("speculative_turn_ms", self.speculative_turn_ms, 0, 10_000)
        check_range("max_clip_bytes", self.max_clip_bytes, 1024, 64 * 2**20)
        check_range("client_voices_per_key", self.client_voices_per_key, 0, 10_000)
        check_range("client_voice_bytes_per_key", self.client_voice_bytes_per_key, 0)
        check_range("max_client_voices", self.max_client_voices, 0)
        check_range("start_timeout_s", self.start_timeout_s, 0.1, 3600)
        check_range("idle_timeout_s", self.idle_timeout_s, 1, 86_400)
        check_range("close_timeout_s", self.close_timeout_s, 0.1, 600)
        check_range("drain_timeout_s", self.drain_timeout_s, 0, 3600)
        check_range("min_segment_chars", self.min_segment_chars, 1, self.max_segment_chars)
        check_range("max_segment_chars", self.max_segment_chars, 16, 100_000)
        check_range("segment_pipeline_depth", self.segment_pipeline_depth, 1, 16)
        check_range("opus_bitrate", self.opus_bitrate, 6000, 510_000)
        check_range("opus_hurry_ms", self.opus_hurry_ms, 0, 10_000)
        for name in ("encode_processes", "decode_processes"):
            if getattr(self, name) is not None:
                check_range(name, getattr(self, name), 0, 64)
        check_range("replicas", self.replicas, 0, 4096)
        check_range("replica_cpus", self.replica_cpus, 0.01)
        if self.replica_gpus is not None:
            check_range("replica_gpus", self.replica_gpus, 0, 64)
        check_range("gateway_processes", self.gateway_processes, 1, 256)
        if self.gateway_processes > 1 and not self.replicas:
            raise ConfigError(
                "--gateway-processes N shares engine replicas between gateway processes: give "
                "--replicas N too"
            )
        if self.ray_address and not self.replicas:
            raise ConfigError(
                "--ray-address places engine replicas on a Ray cluster: give --replicas N too"
            )
        if self.ray_namespace is not None:
            if not self.replicas:
                raise ConfigError(
                    "--ray-namespace names the namespace of engine replicas on Ray: give "
                    "--replicas N too"
                )
            if not _NAMESPACE_RE.match(self.ray_namespace):
                raise ConfigError(
                    f"--ray-namespace {self.ray_namespace!r}: use 1 to 64 letters, digits and "
                    "._- (starting with a letter or digit), e.g. voxgate-prod"
                )

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
