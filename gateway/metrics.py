"""Prometheus metrics, one registry per app (two apps in one process, as in the tests, never
share or collide). Gateway events are counted as they happen; engine figures are read from
`engine.stats()` at scrape time, so the engine thread never calls into prometheus_client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from engine.api import EngineStats
from engine.gc_pauses import GC_PAUSES, PAUSE_BUCKETS_S, GcPauses
from gateway.admission import GATEWAY_CAUSES
from gateway.loop_lag import LAG_BUCKETS_S

if TYPE_CHECKING:
    from gateway.admission import AdmissionRefusal
    from gateway.auth import SessionSlots, SlotRefusal
    from gateway.codec_workers import CodecWorkers
    from gateway.replica_pool import ReplicaPool
    from gateway.supervisor import RestartRecord

CONTENT_TYPE = CONTENT_TYPE_LATEST
_TTFA_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class EngineCollector(Collector):
    """Engine gauges from `stats()`; nothing is yielded while no engine is attached yet."""

    def __init__(self, stats: Callable[[], EngineStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        if stats is None:
            return
        step = stats.last_step
        gauges = {
            "voxgate_engine_running_requests": ("Requests decoding", stats.running),
            "voxgate_engine_waiting_requests": (
                "Requests admitted, not yet prefilled",
                stats.waiting,
            ),
            "voxgate_engine_kv_blocks_used": ("KV cache pages in use", stats.kv_blocks_used),
            "voxgate_engine_kv_blocks_total": ("KV cache pages in the pool", stats.kv_blocks_total),
            "voxgate_engine_batch_size": ("Requests in the last engine step", step.batch_size),
            "voxgate_engine_step_tokens": ("Tokens in the last engine step", step.num_tokens),
            "voxgate_engine_step_llm_seconds": ("LLM time of the last step", step.llm_s),
            "voxgate_engine_step_detok_seconds": (
                "Detokenizer time of the last step",
                step.detok_s,
            ),
            "voxgate_engine_step_host_seconds": ("Host overhead of the last step", step.host_s),
            "voxgate_engine_step_seconds": (
                "Wall time of the last engine step",
                step.llm_s + step.detok_s + step.host_s,
            ),
            "voxgate_engine_up": ("1 while the engine loop runs", int(stats.stepping)),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)
        yield CounterMetricFamily("voxgate_engine_steps", "Engine steps run", value=stats.steps)
        yield from loop_total_counters(stats)
        yield from admission_metrics(stats)


# The engine loop's cumulative counters (EngineStats.totals): metric name → (help, field).
LOOP_TOTALS = {
    "voxgate_engine_loop_turns": ("Engine loop turns", "loop_turns"),
    "voxgate_engine_loop_seconds": ("Time inside engine loop turns", "loop_s"),
    "voxgate_engine_command_seconds": (
        "Time the engine loop spent applying commands between its turns",
        "commands_s",
    ),
    "voxgate_engine_admission_seconds": (
        "Of the commands' time, real-time admission's verdicts on submitted requests",
        "admission_s",
    ),
    "voxgate_engine_stats_seconds": (
        "Time the engine loop spent on stats snapshots (admission's view included)",
        "stats_s",
    ),
    "voxgate_engine_llm_steps": ("LLM steps run", "llm_steps"),
    "voxgate_engine_llm_seconds": ("LLM launch and wait time", "llm_s"),
    "voxgate_engine_llm_rows": ("Requests advanced, summed over LLM steps", "rows"),
    "voxgate_engine_llm_tokens": ("Tokens run, summed over LLM steps", "tokens"),
    "voxgate_engine_prefill_steps": ("LLM steps that ran prompt tokens", "prefill_steps"),
    "voxgate_engine_prefill_graphed_steps": (
        "LLM steps whose fresh prompts replayed the prompt graphs",
        "prefill_graphed",
    ),
    "voxgate_engine_prefill_turn_seconds": (
        "Engine loop turns that launched a prefill step",
        "prefill_turn_s",
    ),
    "voxgate_engine_capped_steps": (
        "LLM steps that left live requests out at max_num_seqs",
        "capped_steps",
    ),
    "voxgate_engine_lead_held_rows": (
        "Requests left out of LLM steps for being ahead of their listener (the lead cap)",
        "lead_held_rows",
    ),
    "voxgate_engine_codec_held_rows": (
        "Requests left out of LLM steps for the chunks they had waiting for the codec",
        "codec_held_rows",
    ),
    "voxgate_engine_codec_jobs": ("Steady codec jobs done", "codec_jobs"),
    "voxgate_engine_codec_rows": ("Streams in steady codec jobs", "codec_rows"),
    "voxgate_engine_codec_seconds": ("Decode time of steady codec jobs", "codec_s"),
    "voxgate_engine_lane_jobs": ("First-chunk lane jobs done", "lane_jobs"),
    "voxgate_engine_lane_rows": ("Streams in first-chunk lane jobs", "lane_rows"),
    "voxgate_engine_lane_seconds": ("Decode time of first-chunk lane jobs", "lane_s"),
    "voxgate_engine_audio_seconds": ("Audio the engine handed out", "audio_s"),
    "voxgate_engine_duplex_frames": ("Full-duplex output frames stepped", "frames_out"),
    "voxgate_engine_duplex_frames_late": (
        "Full-duplex frames the engine finished after they were due",
        "frames_late",
    ),
    "voxgate_engine_duplex_input_late": (
        "Full-duplex frames stepped on silence: the user's audio had not reached the engine",
        "input_late",
    ),
    "voxgate_engine_duplex_input_dropped": (
        "Full-duplex input frames dropped to stay within the input budget",
        "input_dropped",
    ),
    "voxgate_engine_duplex_resyncs": (
        "Times the full-duplex frame grid was moved to now after the loop fell behind",
        "resyncs",
    ),
    "voxgate_engine_gc_full": ("Full garbage collections of the engine's process", "gc_full"),
    "voxgate_engine_gc_full_seconds": (
        "Time the engine's process spent in full garbage collections",
        "gc_full_s",
    ),
}


# Real-time admission (EngineStats.admission): metric name → (help, field).
ADMISSION_GAUGES = {
    "voxgate_engine_realtime_streams": (
        "Streams generating, admitted ones not yet prefilled included",
        "streams",
    ),
    "voxgate_engine_realtime_capacity_streams": (
        "Streams the fitted decode-turn cost keeps in real time (0: not measured yet)",
        "capacity_streams",
    ),
    "voxgate_engine_turn_fixed_seconds": (
        "Fitted decode-turn cost: seconds a turn takes whatever its rows",
        "turn_fixed_s",
    ),
    "voxgate_engine_turn_row_seconds": (
        "Fitted decode-turn cost: seconds each row adds to a turn",
        "turn_per_row_s",
    ),
    "voxgate_engine_turn_page_seconds": (
        "Decode-turn cost: seconds each KV page in use adds to a turn (0: unpriced)",
        "turn_per_page_s",
    ),
    "voxgate_engine_turn_samples": ("Live decode turns the cost is fitted to", "live_turns"),
    "voxgate_engine_codec_job_fixed_seconds": (
        "Fitted cost of a codec job beside the LLM: seconds a job takes whatever it makes",
        "codec_fixed_s",
    ),
    "voxgate_engine_codec_seconds_per_audio_second": (
        "Fitted cost of a codec job beside the LLM: seconds per second of audio it makes",
        "codec_per_audio_s",
    ),
    "voxgate_engine_listeners_settled": (
        "Streams that have played for a while (real-time admission's buffer guard)",
        "settled_listeners",
    ),
    "voxgate_engine_listeners_short": (
        "Settled streams that would run dry before their next audio",
        "short_listeners",
    ),
    "voxgate_engine_speech_tokens_per_char": (
        "Tokens per character of text a stream is expected within (a high quantile of the "
        "pace learned from requests that stopped by themselves; 0 until learned)",
        "tokens_per_char",
    ),
    "voxgate_engine_speech_length_samples": (
        "Requests that stopped by themselves the speech pace is learned from",
        "length_samples",
    ),
}


def admission_metrics(stats: EngineStats) -> Iterator[Metric]:
    admission = stats.admission
    yield GaugeMetricFamily(
        "voxgate_engine_realtime_room",
        "1 while real-time admission would take another stream",
        value=int(stats.realtime_room),
    )
    for name, (doc, attr) in ADMISSION_GAUGES.items():
        yield GaugeMetricFamily(name, doc, value=getattr(admission, attr))
    refusals = CounterMetricFamily(
        "voxgate_engine_admission_refusals",
        "Requests the engine refused at submit, by cause (turn_cost, codec, slow_start, "
        "listeners: real-time admission; kv: the KV pool); sessions refused before reaching "
        "it are in voxgate_gateway_admission_refusals_total",
        labels=["cause"],
    )
    for cause, count in sorted(admission.refusals.items()):
        refusals.add_metric([cause], count)
    yield refusals


def loop_total_counters(stats: EngineStats) -> Iterator[Metric]:
    for name, (doc, attr) in LOOP_TOTALS.items():
        yield CounterMetricFamily(name, doc, value=getattr(stats.totals, attr))


class GcPauseCollector(Collector):
    """`voxgate_gc_pause_seconds{generation}`: how long this process's garbage collections
    held the GIL (the gateway's loop, the engine thread and the codec stop meanwhile)."""

    def __init__(self, pauses: GcPauses) -> None:
        self._pauses = pauses

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "voxgate_gc_pause_seconds",
            "Garbage collections of the gateway's process, by generation, and how long each held "
            "the GIL",
            labels=["generation"],
        )
        for generation, pauses in self._pauses.snapshot().items():
            buckets = [
                (str(bound), count)
                for bound, count in zip(PAUSE_BUCKETS_S, pauses.le_counts, strict=True)
            ]
            family.add_metric([str(generation)], [*buckets, ("+Inf", pauses.count)], pauses.total_s)
        yield family


class CodecWorkersCollector(Collector):
    """A pool of audio codec processes (gateway.codec_workers: the output encoders of
    `--encode-processes`, `voxgate_encoder_…`, or the microphone decoders of
    `--decode-processes`, `voxgate_mic_decoder_…`): how many are alive, how many successors
    replaced dead ones."""

    def __init__(self, workers: CodecWorkers) -> None:
        self._workers = workers

    def collect(self) -> Iterator[Metric]:
        role = self._workers.role
        prefix = role.name.replace("-", "_")
        yield GaugeMetricFamily(
            f"{prefix}_processes_alive",
            f"{role.kind.capitalize()} processes running",
            value=self._workers.alive,
        )
        yield CounterMetricFamily(
            f"{prefix}_process_restarts",
            f"{role.kind.capitalize()} processes started in place of dead ones",
            value=self._workers.restarts,
        )


class Supervised(Protocol):
    """What SupervisorCollector reads: one engine's supervisor (gateway.supervisor), or a
    replica pool, whose replicas' supervision it gives as one (gateway.replica_records)."""

    @property
    def record(self) -> RestartRecord: ...

    def seconds_since_start(self) -> float: ...


class SupervisorCollector(Collector):
    """Engine supervision (gateway.supervisor): deaths, restarts and failed restarts, the
    serving engine's age, why the last one died and why the last rebuild failed, and whether
    the supervisor still tries."""

    def __init__(self, supervisor: Supervised) -> None:
        self._supervisor = supervisor

    def collect(self) -> Iterator[Metric]:
        record = self._supervisor.record
        yield CounterMetricFamily(
            "voxgate_engine_restarts",
            "Engines built in place of a dead one",
            value=record.restarts,
        )
        yield CounterMetricFamily(
            "voxgate_engine_deaths",
            "Engines that died while serving (killed, crashed)",
            value=record.deaths,
        )
        yield CounterMetricFamily(
            "voxgate_engine_restart_failures",
            "Rebuilds of a dead engine that failed (to build, to load, or to be prepared)",
            value=record.restart_failures,
        )
        yield GaugeMetricFamily(
            "voxgate_engine_seconds_since_restart",
            "Seconds since the engine serving now became ready (its start, or the last restart)",
            value=self._supervisor.seconds_since_start(),
        )
        yield GaugeMetricFamily(
            "voxgate_engine_healthy",
            "0 once the supervisor has given up restarting a crash-looping engine",
            value=int(record.healthy),
        )
        yield from _reason_info(
            "voxgate_engine_last_death",
            "Why the last engine died (label reason); 1 once one has",
            record.last_death,
        )
        yield from _reason_info(
            "voxgate_engine_last_restart_failure",
            "Why the last rebuild of a dead engine failed (label reason); 1 once one has",
            record.last_restart_failure,
        )


def _reason_info(name: str, help_text: str, reason: str) -> Iterator[Metric]:
    """A reason as an info-style gauge (1, labelled `reason`), once there is one."""
    if reason:
        info = GaugeMetricFamily(name, help_text, labels=["reason"])
        info.add_metric([reason[:200]], 1)
        yield info


def _loop_tasks() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # scraped off the event loop (no loop running in this thread)
        return 0


class GatewayMetrics:
    def __init__(self, engine_stats: Callable[[], EngineStats | None]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # Read from the session slots at scrape time (watch_slots), the count --max-sessions caps.
        self.sessions = Gauge(
            "voxgate_sessions",
            "Sessions holding a slot: open WebSocket sessions and HTTP speech requests in "
            "progress (the count --max-sessions caps)",
            registry=r,
        )
        self.sessions_closed = Counter(
            "voxgate_sessions_closed", "Sessions ended, by close code", ["code"], registry=r
        )
        self.handshakes_refused = Counter(
            "voxgate_handshakes_refused",
            "Handshakes refused, by HTTP status",
            ["status"],
            registry=r,
        )
        self.responses = Counter(
            "voxgate_responses", "Responses finished, by status", ["status"], registry=r
        )
        self.errors = Counter("voxgate_errors", "Error events sent, by code", ["code"], registry=r)
        self.speculative_turns = Counter(
            "voxgate_speculative_turns",
            "Replies begun at a pause in the user's speech, by outcome (confirmed: the turn "
            "had ended; discarded: the user spoke on; unprepared: the model refused the turn so "
            "far)",
            ["outcome"],
            registry=r,
        )
        # Refused before reaching the engine (gateway/admission.py); the engine counts its own
        # refusals at submit (voxgate_engine_admission_refusals_total): each refusal is in one.
        self.admission_refusals = Counter(
            "voxgate_gateway_admission_refusals",
            "Sessions and HTTP speech requests the gateway refused before they reached the "
            "engine, by cause (not_ready, kv, waiting, and real-time admission's turn_cost, "
            "codec, slow_start, listeners: its admission check; max_sessions, key_sessions: "
            "the session caps)",
            ["cause"],
            registry=r,
        )
        for cause in GATEWAY_CAUSES:
            self.admission_refusals.labels(cause)
        self.ttfa = Histogram(
            "voxgate_ttfa_seconds",
            "Time from a response's first text to its first audio frame",
            buckets=_TTFA_BUCKETS,
            registry=r,
        )
        self.underruns = Counter(
            "voxgate_underruns",
            "Frames sent after the client's buffer had run dry (late frames)",
            registry=r,
        )
        self.audio_sent = Counter(
            "voxgate_audio_sent_seconds", "Seconds of audio sent to clients", registry=r
        )
        self.slow_clients = Counter(
            "voxgate_slow_client_closes",
            "Sessions closed because the client stopped reading",
            registry=r,
        )
        self.loop_lag = Histogram(
            "voxgate_event_loop_lag_seconds",
            "How late the gateway's event loop woke for a timer (gateway.loop_lag)",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.encode_queue = Histogram(
            "voxgate_encode_queue_seconds",
            "How long an output-audio encode waited for its worker (thread or process)",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.encode_run = Histogram(
            "voxgate_encode_run_seconds",
            "How long an output-audio encode ran on its worker (thread or process)",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.audio_delivery = Histogram(
            "voxgate_audio_delivery_seconds",
            "From the engine having a chunk of audio to its first frame leaving the gateway: the "
            "engine's event transport, the encode's queue and run, the event loop (an engine on "
            "this host only)",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        self.encode_hurried = Histogram(
            "voxgate_encode_hurried_seconds",
            "How long the encodes that ran hurried (Opus complexity 6: the encoders were behind, "
            "--opus-hurry-ms) waited for their worker",
            buckets=LAG_BUCKETS_S,
            registry=r,
        )
        # Tasks on the serving event loop (read at scrape time, on that loop): sessions that
        # ended leave none behind.
        self.loop_tasks = Gauge(
            "voxgate_event_loop_tasks", "Tasks alive on the gateway's event loop", registry=r
        )
        self.loop_tasks.set_function(_loop_tasks)
        r.register(EngineCollector(engine_stats))
        r.register(GcPauseCollector(GC_PAUSES.install()))

    def count_refused(self, refusal: AdmissionRefusal | SlotRefusal) -> None:
        """A session or HTTP speech request refused before it reached the engine: the error
        its client is told (`voxgate_errors{code}`) and the cause it is refused for
        (`voxgate_gateway_admission_refusals{cause}`)."""
        self.errors.labels(refusal.code.value).inc()
        self.admission_refusals.labels(refusal.cause).inc()

    def watch_slots(self, slots: SessionSlots) -> None:
        """`voxgate_sessions` is the slots held, by WebSocket sessions and HTTP requests alike."""
        self.sessions.set_function(lambda: slots.total)

    def watch_codec_workers(self, workers: CodecWorkers) -> None:
        self.registry.register(CodecWorkersCollector(workers))

    def watch_supervisor(self, supervisor: Supervised) -> None:
        self.registry.register(SupervisorCollector(supervisor))

    def watch_replicas(self, pool: ReplicaPool) -> None:
        """Each replica's figures, labelled (the engine gauges show the pool's sum)."""
        from gateway.replica_metrics import ReplicaCollector

        self.registry.register(ReplicaCollector(pool))

    def observe_encode(self, queued_s: float, run_s: float, hurried: bool) -> None:
        """An encode's time queued and running, and whether it ran hurried
        (gateway.audio.EncodeObserver; any thread)."""
        self.encode_queue.observe(queued_s)
        self.encode_run.observe(run_s)
        if hurried:
            self.encode_hurried.observe(queued_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
