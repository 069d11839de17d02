"""The load generator: open-loop requests over `/v1/stream`, one WebSocket session each.

Each request connects shortly before its planned time (`connect_ahead_s`, so the handshake
does not shift the arrival process), sends `session.start` (output format, min_tokens =
max_tokens), then at its planned time the final `text`, and records every frame's arrival on
the monotonic clock until `response.done`. Opus is never decoded: a frame's duration is the
session's `frame_ms` (every frame the gateway sends holds exactly that much audio), a pcm16
frame's is its byte count.

One process keeps hundreds of sessions going; its event-loop lag is measured and reported so
that a saturated client cannot pass for a slow server. For heavier loads the plan is spread
over worker processes (`procs`), which share the monotonic clock and an early-stop counter.
This module imports no torch: workers start in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import resource
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from voxbench.metrics import OnTimeTracker, distribution
from voxbench.records import RequestRecord
from voxbench.workload import PlannedRequest
from voxgate import client

SUBPROTOCOL = "voxgate.v1"
_STOP_POLL_S = 0.05


@dataclass(frozen=True)
class ClientOptions:
    url: str  # ws://host:port/v1/stream
    output_audio: dict[str, Any] = field(
        default_factory=lambda: {"format": "opus", "sample_rate": 48000, "frame_ms": 20}
    )
    buffer_ms: float = 0.0  # initial playback buffer b (for the live viability check)
    sampling: dict[str, Any] = field(default_factory=dict)  # besides min_tokens / max_tokens
    voice: str | None = None
    api_key: str | None = None
    connect_ahead_s: float = 0.5
    open_timeout_s: float = 30.0
    drain_timeout_s: float = 60.0  # after the last planned send, how long to wait for the rest
    # Full-duplex listeners (Moshi): instead of text, each session streams these microphone
    # packets (in `input_audio`'s format, one every `mic_frame_ms`, cycled) in real time for
    # the request's audio_seconds, then `input.commit`; TTFA counts from the first packet.
    input_audio: dict[str, Any] | None = None
    mic_packets: tuple[bytes, ...] = ()
    mic_frame_ms: float = 20.0


@dataclass
class PointOutcome:
    records: list[RequestRecord]
    wall_s: float  # first planned send → last request settled
    stopped_early: bool  # enough requests were already not viable: the point cannot pass
    drain_timeouts: int  # requests still running at the drain deadline (counted failed)
    client: dict[str, Any]  # how the client fared: processes, uvloop, loop lag


# --- the early-stop counter -------------------------------------------------------------------
class _Stop:
    """Counts requests known not to be viable; past `limit` the point stops (None: never)."""

    def __init__(self, limit: int | None, counter=None, flag=None) -> None:
        self.limit = limit
        self._counter = counter  # multiprocessing.Value shared by worker processes, or None
        self._flag = flag  # multiprocessing.Event, or None
        self._local = 0

    def mark(self) -> None:
        if self._counter is None:
            self._local += 1
            count = self._local
        else:
            with self._counter.get_lock():
                self._counter.value += 1
                count = self._counter.value
        if self.limit is not None and count > self.limit and self._flag is not None:
            self._flag.set()

    @property
    def stopped(self) -> bool:
        if self._flag is not None:
            return self._flag.is_set()
        return self.limit is not None and self._local > self.limit

    async def wait(self) -> None:
        while not self.stopped:
            await asyncio.sleep(_STOP_POLL_S)


# --- one request ------------------------------------------------------------------------------
async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _frame_timing(spec: dict[str, Any]) -> tuple[float | None, float]:
    """(uniform frame ms or None, bytes per ms for pcm16) from session.started's output_audio."""
    if spec.get("format") == "pcm16":
        return None, spec["sample_rate"] * 2 / 1000
    return float(spec.get("frame_ms", 20)), 0.0


def _connect(opts: ClientOptions) -> connect:
    """One `/v1/stream` connection with the bench's settings (and its API key, if any)."""
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else None
    return connect(
        opts.url,
        subprotocols=[SUBPROTOCOL],
        additional_headers=headers,
        proxy=None,
        open_timeout=opts.open_timeout_s,
        max_size=None,
        max_queue=1024,
        compression=None,
        ping_interval=None,
        close_timeout=2,
    )


async def _request(
    plan: PlannedRequest, rec: RequestRecord, opts: ClientOptions, start_at: float, stop: _Stop
) -> None:
    await _sleep_until(start_at + plan.offset_s - opts.connect_ahead_s)
    rec.connect_s = time.monotonic() - start_at
    tracker = OnTimeTracker(opts.buffer_ms)
    late = False
    start: dict[str, Any] = {"type": "session.start", "output_audio": opts.output_audio}
    if opts.mic_packets:
        start["input_audio"] = opts.input_audio
    else:
        start["sampling"] = {
            **opts.sampling,
            "min_tokens": plan.tokens,
            "max_tokens": plan.tokens,
        }
    if opts.voice:
        start["voice"] = opts.voice
    mic: asyncio.Task | None = None
    try:
        async with _connect(opts) as ws:
            await ws.send(json.dumps(start))
            sent = 0.0
            frame_ms, bytes_per_ms = None, 0.0
            while True:
                message = await ws.recv()
                now = time.monotonic()
                if isinstance(message, bytes):
                    arrival = (now - sent) * 1000
                    rec.arrivals_ms.append(arrival)
                    if frame_ms is None:
                        duration = len(message) / bytes_per_ms
                        rec.durations_ms.append(duration)
                    else:
                        duration = frame_ms
                    if not tracker.add(arrival, duration) and not late:
                        late = rec.late = True
                        stop.mark()
                    continue
                event = json.loads(message)
                kind = event.get("type")
                if kind == "session.started":
                    rec.started_s = now - start_at
                    frame_ms, bytes_per_ms = _frame_timing(event.get("output_audio") or {})
                    rec.frame_ms = frame_ms
                    rec.durations_ms = [] if frame_ms is None else None
                    await _sleep_until(start_at + plan.offset_s)
                    sent = rec.sent_at = time.monotonic()
                    rec.sent_s = sent - start_at
                    if opts.mic_packets:
                        mic = asyncio.create_task(_speak(ws, opts, plan.item.audio_seconds, sent))
                    else:
                        await ws.send(
                            json.dumps({"type": "text", "text": plan.item.text, "final": True})
                        )
                elif kind == "response.started":
                    rec.response_id = event.get("response_id")
                elif kind == "response.done":
                    rec.done = {k: event.get(k) for k in ("status", "audio_ms", "ttfa_ms")}
                    break
                elif kind == "error":
                    rec.errors.append({k: event.get(k) for k in ("code", "message", "fatal")})
    except ConnectionClosed as exc:
        rec.close_code = exc.rcvd.code if exc.rcvd is not None else None
        if rec.close_code is None:
            rec.exception = "connection_lost"
    except InvalidStatus as exc:
        rec.exception = f"http_{exc.response.status_code}"
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        rec.exception = f"{type(exc).__name__}: {exc}"[:200]
    except (ValueError, KeyError, TypeError) as exc:  # a server event the client cannot read
        rec.exception = f"bad_event: {exc!r}"[:200]
    finally:
        if mic is not None:
            mic.cancel()
    if not rec.ok and not late:
        stop.mark()


async def _speak(ws, opts: ClientOptions, seconds: float, began: float) -> None:
    """A full-duplex listener's microphone: `seconds` of packets on the real-time clock from
    `began`, then `input.commit` (the server then ends the response, `completed`)."""
    period = opts.mic_frame_ms / 1000
    count = max(1, round(seconds / period))
    with contextlib.suppress(ConnectionClosed):
        for i in range(count):
            await _sleep_until(began + i * period)
            await ws.send(opts.mic_packets[i % len(opts.mic_packets)])
        await ws.send(json.dumps({"type": "input.commit"}))


# --- what the server says about its model ---------------------------------------------------
async def _session_started(opts: ClientOptions) -> dict[str, Any]:
    session = await client.connect(
        opts.url,
        api_key=opts.api_key,
        output_audio=opts.output_audio,
        decode_audio=False,
        open_timeout=opts.open_timeout_s,
    )
    info = session.info
    await session.end()  # session.ended, then the server's close
    assert info is not None
    return info.raw


def probe_session(opts: ClientOptions, timeout_s: float = 30.0) -> dict[str, Any]:
    """The `session.started` event of one session, opened and ended cleanly (the served model's
    facts, before any load), through the Python client (voxgate.client)."""
    try:
        started, _ = run_async(lambda: asyncio.wait_for(_session_started(opts), timeout_s))
    except (OSError, TimeoutError, client.VoxgateError) as exc:
        raise RuntimeError(f"could not open a session at {opts.url}: {exc!r}") from exc
    return started


# --- one process's share of a point -----------------------------------------------------------
async def _lag_monitor(samples: list[float], period_s: float = 0.01) -> None:
    """How late the event loop wakes a 10 ms sleeper: the client's own queueing delay."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period_s)
        samples.append((time.monotonic() - t - period_s) * 1000)


async def _run_shard(
    plan: list[PlannedRequest], opts: ClientOptions, start_at: float, stop: _Stop
) -> tuple[list[RequestRecord], list[float], bool]:
    records = [
        RequestRecord(p.index, p.item.id, p.item.audio_seconds, p.tokens, round(p.offset_s, 4))
        for p in plan
    ]
    lags: list[float] = []
    monitor = asyncio.create_task(_lag_monitor(lags))
    tasks = [
        asyncio.create_task(_request(p, r, opts, start_at, stop))
        for p, r in zip(plan, records, strict=True)
    ]
    deadline = start_at + max((p.offset_s for p in plan), default=0.0) + opts.drain_timeout_s
    everything = asyncio.gather(*tasks)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait(
        {everything, stopper},
        timeout=max(0.0, deadline - time.monotonic()),
        return_when=asyncio.FIRST_COMPLETED,
    )
    stopped = stopper.done() and not everything.done()
    for task, rec in zip(tasks, records, strict=True):
        if not task.done():
            task.cancel()
            if stopped:
                rec.aborted = True
            else:
                rec.exception = "drain_timeout"
    for task in (*tasks, monitor, stopper):
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await everything
    await asyncio.gather(monitor, stopper, return_exceptions=True)
    # Requests never sent before a stop are not part of the measurement.
    kept = [r for r in records if r.sent_s is not None or not r.aborted]
    return kept, lags, stopped


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_async(main: Callable[[], Coroutine[Any, Any, Any]]) -> tuple[Any, bool]:
    """Run a coroutine on a fresh loop (uvloop when installed); returns (result, used uvloop)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main()), False
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main()), True


_WORKER_STATE: dict[str, Any] = {}


def _init_worker(counter, flag) -> None:
    _WORKER_STATE["counter"], _WORKER_STATE["flag"] = counter, flag
    _raise_fd_limit()


def _shard_entry(plan, opts, start_at, limit):
    stop = _Stop(limit, _WORKER_STATE["counter"], _WORKER_STATE["flag"])
    (records, lags, stopped), uv = run_async(lambda: _run_shard(plan, opts, start_at, stop))
    return records, lags, stopped, uv


# A client mode's share of a plan: (its items, options, start time) → its records. A function
# at module level, so that worker processes can be handed it.
ShardMain = Callable[[list, Any, float], Coroutine[Any, Any, list]]


async def _with_lag(main: Coroutine[Any, Any, list]) -> tuple[list, list[float]]:
    lags: list[float] = []
    monitor = asyncio.create_task(_lag_monitor(lags))
    try:
        return await main, lags
    finally:
        monitor.cancel()
        await asyncio.gather(monitor, return_exceptions=True)


def _play_entry(main: ShardMain, plan: list, opts: Any, start_at: float):
    (records, lags), uv = run_async(lambda: _with_lag(main(plan, opts, start_at)))
    return records, lags, False, uv


def _client_info(procs: int, shards: list[tuple]) -> dict[str, Any]:
    """How the client fared: its processes, whether they ran uvloop, their loops' lag."""
    return {
        "procs": procs,
        "uvloop": all(s[3] for s in shards),
        "loop_lag_ms": distribution([x for s in shards for x in s[1]]),
    }


# --- the generator ----------------------------------------------------------------------------
class LoadGenerator:
    """Runs rate points; with `procs` > 1 a pool of worker processes (started once, reused)
    each plays every procs-th request of the plan."""

    def __init__(self, procs: int = 1) -> None:
        self.procs = max(1, procs)
        self._pool = None
        self._counter = self._flag = None

    def __enter__(self) -> LoadGenerator:
        _raise_fd_limit()
        if self.procs > 1:
            ctx = multiprocessing.get_context("spawn")
            self._counter, self._flag = ctx.Value("i", 0), ctx.Event()
            self._pool = ctx.Pool(self.procs, _init_worker, (self._counter, self._flag))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def run(
        self,
        plan: list[PlannedRequest],
        opts: ClientOptions,
        stop_after_nonviable: int | None = None,
    ) -> PointOutcome:
        """Play `plan`; stop early once more than `stop_after_nonviable` requests are known not
        to be viable (the point then cannot pass; None: never stop early)."""
        if self._pool is None:
            start_at = time.monotonic() + opts.connect_ahead_s + 0.2
            stop = _Stop(stop_after_nonviable)
            (records, lags, stopped), uv = run_async(lambda: _run_shard(plan, opts, start_at, stop))
            shards = [(records, lags, stopped, uv)]
        else:
            self._counter.value = 0
            self._flag.clear()
            start_at = time.monotonic() + opts.connect_ahead_s + 1.0  # workers are already up
            pending = [
                self._pool.apply_async(
                    _shard_entry, (plan[k :: self.procs], opts, start_at, stop_after_nonviable)
                )
                for k in range(self.procs)
            ]
            shards = [p.get() for p in pending]
        end = time.monotonic()
        records = sorted((r for s in shards for r in s[0]), key=lambda r: r.index)
        return PointOutcome(
            records=records,
            wall_s=round(end - start_at, 3),
            stopped_early=any(s[2] for s in shards),
            drain_timeouts=sum(1 for r in records if r.exception == "drain_timeout"),
            client=_client_info(self.procs, shards),
        )

    def play(
        self, main: ShardMain, plan: list, opts: Any, lead_s: float = 0.7
    ) -> tuple[list, dict[str, Any], float]:
        """Another client mode on the same processes: `main(items, opts, start_at)` plays every
        procs-th item of `plan` from `start_at` (`lead_s` from now, more with workers) and
        returns their records. Returns (every record, how the client fared, wall seconds)."""
        if self._pool is None:
            start_at = time.monotonic() + lead_s
            shards = [_play_entry(main, plan, opts, start_at)]
        else:
            start_at = time.monotonic() + lead_s + 0.8  # workers are already up
            pending = [
                self._pool.apply_async(_play_entry, (main, plan[k :: self.procs], opts, start_at))
                for k in range(self.procs)
            ]
            shards = [p.get() for p in pending]
        wall = time.monotonic() - start_at
        records = [r for s in shards for r in s[0]]
        return records, _client_info(self.procs, shards), round(wall, 3)
