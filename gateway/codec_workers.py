"""Audio codec work in processes of the gateway's own: output encoding (`voxgate serve
--encode-processes N`; by default half the host's cores, 4 to 16, when the engine runs on a
CUDA GPU, none on a CPU) and, in a pool of its own, full-duplex microphones' decoding
(`--decode-processes`, below).

Why: on worker threads (`audio.OffLoopEncoder`) encodes share the gateway's GIL with its event
loop and the engine-event reader, and each return from C waits for it. Under a GPU engine's
load (a hundred streams and more), encodes that take 1-4 ms alone then run tens of ms, and
first chunks' frames come late while the engine is on time. A process has its own
interpreter: there a chunk's encode runs at the codec's speed, and the gateway's side of it is
one message out and one back. Each call carries the time it was made, so the worker can tell
how long it waited and hurry the encode when the workers are behind (gateway.audio,
HURRIED_COMPLEXITY). Calls travel in batches: the sender thread sends every call queued when
it wakes as one message, the worker answers a batch with one, and the reader resolves a
batch's futures with one wake-up of the event loop. An engine step hands a gateway a chunk
for each of its streams at once (128 full-duplex sessions: 128 encodes every 80 ms), so a
batch carries tens of calls where each would have cost a pickle, a pipe write and a wake-up.
The worker answers as it goes, every REPLY_EVERY_S of encoding, so a batch's first streams
do not wait for its last.

A pool of the same processes decodes the users' microphones (`--decode-processes`, a pool of
its own so that decodes never wait behind an engine step's burst of encodes): a full-duplex
session's Opus packet, 20 ms of audio 50 times a second, costs the event loop ~36 µs to decode
itself (at 128 Moshi sessions a quarter of the loop), and a few µs to hand to a worker in a
batch (`open_decoder`, `PooledDecoder`; gateway/duplex.py keeps the session's audio in order).

Each response's encoder (and each session's decoder) lives in one worker process for its whole
life (its state is sequential), chosen round-robin; a pipe per worker carries the messages in order, so calls of
one encoder run in the order they were made, and one whose awaiting task was cancelled
(barge-in) still runs before the next, as on threads. A sender thread per worker keeps the
event loop from blocking on a full pipe; a reader thread resolves the futures. If a worker
dies, its calls in flight and any later call on its encoders or decoders raise
`CodecProcessFailed` (their state died with it); new ones go to the workers still alive, and a
successor is started in its place after a pause that doubles while its slot keeps dying (a
worker that crashes on every encode must not become a busy loop of spawns).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import multiprocessing as mp
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from gateway.audio import ChunkEncoder, EncodeObserver, make_encoder, run_encode
from gateway.audio_in import DirectOpusDecoder, UndecodableAudio
from gateway.opus_lib import load_opus
from gateway.protocol import AudioSpec

log = logging.getLogger("voxgate.gateway")
START_TIMEOUT_S = 60.0
# A successor replaces a dead worker after this pause, doubled for each death of the same slot
# less than RESTART_WINDOW_S after its last restart, up to MAX_RESTART_DELAY_S.
RESTART_DELAY_S = 1.0
RESTART_WINDOW_S = 60.0
MAX_RESTART_DELAY_S = 60.0
# Worker processes when --encode-processes is not given and the engine runs on a CUDA GPU:
# half the host's usable cores, at least GPU_MIN_PROCESSES and at most GPU_MAX_PROCESSES. An
# Orpheus stream's Opus at full complexity costs ~1.2 % of a core (0.23 ms a 20-ms frame), so
# 300 streams keep ~3.5 cores encoding and more while new streams bank audio faster than real
# time: on H100 and H200 hosts (16 cores) four workers let 23-43 % of encodes wait 20 ms or
# more at 280-336 streams, and those waits made young streams' second chunks late
# (BENCHMARKS.md). Four are the least: with them CosyVoice 2's 12 req/s on an H200 keeps
# every encode under 20 ms. On a CPU-only machine the engine needs the cores, and its few
# streams never convoy, so threads stay the default there.
GPU_MIN_PROCESSES = 4
GPU_MAX_PROCESSES = 16
# Microphone decoder processes when --decode-processes is not given and the engine runs on a
# CUDA GPU: 128 full-duplex sessions' packets take ~0.2 of a core to decode; two keep a
# session's decoder alive elsewhere if one process dies.
GPU_DEFAULT_DECODE_PROCESSES = 2
# A worker sends the replies it has once it has encoded this long since its last send (and at
# the end of each batch): a few replies a message, and none waits more than this for others.
REPLY_EVERY_S = 0.002


def gpu_default_encode_processes(cores: int | None = None) -> int:
    """Encode workers beside a CUDA engine: half the host's usable `cores` (default: those
    this process may run on), within GPU_MIN_PROCESSES..GPU_MAX_PROCESSES."""
    if cores is None:
        cores = usable_cores()
    return min(GPU_MAX_PROCESSES, max(GPU_MIN_PROCESSES, cores // 2))


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container's CPU set limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # platforms without affinity (macOS)
        return os.cpu_count() or 1


def process_count(asked: int | None, device: str | None, gpu_default: int | None = None) -> int:
    """How many worker processes to start: `asked` if given, else `gpu_default` (None: the
    encoders' default, gpu_default_encode_processes) when the engine runs on CUDA (`device`:
    the engine's `--device`; None means CUDA if a GPU is visible), else none."""
    if asked is not None:
        return asked
    if not _runs_on_cuda(device):
        return 0
    return gpu_default_encode_processes() if gpu_default is None else gpu_default


def _runs_on_cuda(device: str | None) -> bool:
    if device is not None:
        return device.startswith("cuda")
    import torch  # the engine has imported it already; here only when the gateway builds one

    return torch.cuda.is_available()


class CodecProcessFailed(RuntimeError):
    """The codec's worker process is gone (an output encoder's or a microphone decoder's), or
    the encode or decode failed there."""


@dataclass(frozen=True)
class WorkerRole:
    """What a pool's processes do, as its log lines, errors and process names say it."""

    purpose: str  # "output encoding"
    kind: str  # "output encoder" (… process voxgate-encoder-0 exited)
    name: str  # the processes' name prefix
    option: str  # the serve option that sets how many


ENCODERS = WorkerRole("output encoding", "output encoder", "voxgate-encoder", "--encode-processes")
MIC_DECODERS = WorkerRole(
    "microphone decoding", "microphone decoder", "voxgate-mic-decoder", "--decode-processes"
)


def _worker_main(conn: Connection) -> None:
    """A worker process: encoders by id, messages in order, until "stop" or a closed pipe. The
    pipe closes when the gateway's process is gone, however it died (SIGKILL included): a
    worker never outlives it, so it needs no watch of its own (engine/parent_watch.py)."""
    encoders: dict[int, object] = {}
    while True:
        try:
            batch = conn.recv()  # a list of messages, in the order they were made
        except (EOFError, OSError):
            return
        replies: list[tuple] = []
        since = time.perf_counter()
        for message in in_need_order(batch):
            op = message[0]
            if op == "stop":
                return
            if op == "ping":  # start-up: imports done, ready to encode
                replies.append(("pong",))
            elif op == "open":
                _, eid, spec, source_rate, bitrate, hurry_after_s = message
                try:
                    encoders[eid] = make_encoder(spec, source_rate, bitrate, hurry_after_s)
                except Exception as exc:  # reported by the encoder's first call
                    encoders[eid] = exc
            elif op == "open_decoder":
                _, did, rate = message
                try:
                    encoders[did] = DirectOpusDecoder(rate, load_opus())
                except Exception as exc:  # reported by the decoder's first call
                    encoders[did] = exc
            elif op == "close":
                encoders.pop(message[1], None)
            else:
                replies.append(_run_call(encoders, message))
            if replies and time.perf_counter() - since >= REPLY_EVERY_S:
                if not _send_replies(conn, replies):
                    return
                replies, since = [], time.perf_counter()
        if replies and not _send_replies(conn, replies):
            return


# A batch's messages by kind: opens run first (an encoder's precedes its calls, and costs
# little), then the calls, then closes; "stop" ends the batch.
_OPENS = ("open", "open_decoder", "ping")
_CLOSES = ("close", "stop")


def in_need_order(batch: list[tuple]) -> list[tuple]:
    """A batch's messages in the order the worker runs them: opens, then the calls by when
    their listeners need them (`needed_by`, or the time a call without one was made), then
    closes. Each encoder's (and decoder's) calls keep the order they were made in: a call is
    never needed before the one made before it on its encoder, which its state follows.

    Why: an engine step hands the gateway a chunk for many streams at once, so a batch holds
    listeners waiting for their first audio, listeners whose next chunk is due in tens of ms
    and listeners with seconds of audio ahead; in the order made, the first two wait behind the
    last (a ramp of arrivals on an H100: second chunks reached their clients up to 44 ms late
    though the engine sent them in time, BENCHMARKS.md)."""
    opens = [m for m in batch if m[0] in _OPENS]
    closes = [m for m in batch if m[0] in _CLOSES]
    calls = [m for m in batch if m[0] not in _OPENS and m[0] not in _CLOSES]
    keyed, last_key = [], {}
    for made, call in enumerate(calls):
        _, eid, _, _, submitted, needed_by = call
        key = max(submitted if needed_by is None else needed_by, last_key.get(eid, -math.inf))
        last_key[eid] = key
        keyed.append((key, made, call))
    keyed.sort(key=lambda item: item[:2])
    return opens + [call for _, _, call in keyed] + closes


def _send_replies(conn: Connection, replies: list[tuple]) -> bool:
    try:
        conn.send(replies)
    except (EOFError, OSError):
        return False
    return True


def _decode_all(decoder: DirectOpusDecoder, packets: list[bytes]) -> tuple[bytes, list[str]]:
    """Packets in order → (their samples as float32 bytes, one message per bad packet). A bad
    packet is the client's fault, not the worker's: the others decode around it."""
    pieces, bad = [], []
    for packet in packets:
        try:
            pieces.append(decoder.decode(packet))
        except UndecodableAudio as exc:
            bad.append(str(exc))
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.float32)).tobytes(), bad


def _run_call(encoders: dict[int, object], message: tuple) -> tuple:
    """An encode, flush or decode call in the worker → its reply."""
    op, eid, seq, payload, submitted, _ = message
    started = time.perf_counter()
    try:
        encoder = encoders[eid]
        if isinstance(encoder, Exception):
            raise encoder
        if op == "decode":  # payload: Opus packets; back: their samples, and why any was bad
            return ("ok", seq, _decode_all(encoder, payload), time.perf_counter() - started, False)
        # How long the call waited since the gateway made it (time.monotonic reads one
        # clock in every process: CLOCK_MONOTONIC on Linux, mach time on macOS).
        queued_s = time.monotonic() - submitted
        out, hurried = run_encode(encoder, payload if op == "encode" else None, queued_s)
        return ("ok", seq, out, time.perf_counter() - started, hurried)
    except Exception as exc:
        return ("error", seq, f"{type(exc).__name__}: {exc}", 0.0, False)


class _Worker:
    """One worker process and the two threads that talk to it. `on_exit` runs on the reader
    thread once the process is gone and its calls have failed."""

    def __init__(
        self,
        ctx: mp.context.BaseContext,
        index: int,
        on_exit: Callable[[_Worker], None] | None = None,
        role: WorkerRole | None = None,
    ) -> None:
        self.index = index
        self.role = role or ENCODERS
        self.name = f"{self.role.name}-{index}"
        self._on_exit = on_exit
        ours, theirs = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(theirs,), name=self.name, daemon=True)
        self.process.start()
        theirs.close()
        self._conn = ours
        ours.send([("ping",)])  # answered once the worker's imports are done (wait_started)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future, float]] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self.failure: str | None = None
        self.batches_sent = 0  # messages to the worker, each a batch of calls

    def wait_started(self) -> _Worker:
        """Wait for the worker's imports (so the first response does not pay for them), then
        start the threads that talk to it. Separate from __init__ so that a pool's processes
        import side by side rather than one after another."""
        if not self._conn.poll(START_TIMEOUT_S):
            self.process.terminate()
            raise CodecProcessFailed(f"{self.name} did not start in {START_TIMEOUT_S:.0f} s")
        self._conn.recv()
        threading.Thread(target=self._send_loop, name=f"{self.name}-send", daemon=True).start()
        threading.Thread(target=self._read_loop, name=f"{self.name}-read", daemon=True).start()
        return self

    def post(self, message: tuple) -> None:
        """A message that wants no answer (open, close, stop)."""
        self._outbox.put(message)

    def call(
        self,
        op: str,
        eid: int,
        payload: np.ndarray | list[bytes] | None,
        needed_by: float | None = None,
    ) -> asyncio.Future:
        """encode (`payload`: PCM) / flush on encoder `eid`, or decode (`payload`: packets) on
        decoder `eid`; `needed_by`: when its listener needs the result (time.monotonic), which
        orders the calls that wait together (in_need_order). Resolves to (frames, or samples
        and bad packets' messages, seconds queued, seconds run, whether it ran hurried)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self.failure is not None:
                future.set_exception(CodecProcessFailed(self.failure))
                return future
            seq = next(self._seq)
            self._pending[seq] = (loop, future, time.perf_counter())
        self._outbox.put((op, eid, seq, payload, time.monotonic(), needed_by))
        return future

    def stop(self, timeout_s: float) -> None:
        self._outbox.put(("stop",))
        self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout_s)
        self._outbox.put(None)  # ends the sender thread

    def _send_loop(self) -> None:
        """Every message queued when this thread wakes goes as one batch, in order."""
        while (message := self._outbox.get()) is not None:
            batch = [message]
            while True:
                try:
                    more = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._send_batch(batch)
                    return
                batch.append(more)
            if not self._send_batch(batch):
                return

    def _send_batch(self, batch: list[tuple]) -> bool:
        try:
            self._conn.send(batch)
        except (OSError, ValueError):
            return False  # the reader sees the pipe close and fails what is pending
        self.batches_sent += 1
        return True

    def _read_loop(self) -> None:
        while True:
            try:
                replies = self._conn.recv()
            except (EOFError, OSError):
                self._fail(f"{self.role.kind} process {self.name} exited")
                if self._on_exit is not None:
                    self._on_exit(self)
                return
            now = time.perf_counter()
            # One wake-up of each event loop for all its futures in the batch.
            by_loop: dict[asyncio.AbstractEventLoop, list] = {}
            for status, seq, value, run_s, hurried in replies:
                with self._lock:
                    entry = self._pending.pop(seq, None)
                if entry is None:
                    continue
                loop, future, sent = entry
                if status == "ok":
                    outcome = (future, (value, now - sent - run_s, run_s, hurried), None)
                else:
                    outcome = (future, None, CodecProcessFailed(value))
                by_loop.setdefault(loop, []).append(outcome)
            for loop, outcomes in by_loop.items():
                _resolve_all_from_thread(loop, outcomes)

    def _fail(self, reason: str) -> None:
        with self._lock:
            self.failure = reason
            pending, self._pending = self._pending, {}
        for loop, future, _ in pending.values():
            _resolve_all_from_thread(loop, [(future, None, CodecProcessFailed(reason))])


def _resolve_all_from_thread(loop, outcomes: list) -> None:
    """(future, result, error) each, resolved on `loop` in one callback."""
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        loop.call_soon_threadsafe(_resolve_all, outcomes)


def _resolve_all(outcomes: list) -> None:
    for future, result, error in outcomes:
        _resolve(future, result, error)


def _resolve(future: asyncio.Future, result, error: Exception | None) -> None:
    if future.done():  # its awaiting task was cancelled (barge-in, disconnect)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class PooledEncoder(ChunkEncoder):
    """A response's encoder in a worker process (CodecWorkers.open)."""

    def __init__(
        self,
        worker: _Worker,
        eid: int,
        spec: AudioSpec,
        source_rate: int,
        observe: EncodeObserver | None,
    ) -> None:
        self.spec = spec
        self.source_rate = source_rate
        self._worker = worker
        self._eid = eid
        self._observe = observe
        # The worker's encoder goes with this object, however the response ends.
        self._closer = weakref.finalize(self, worker.post, ("close", eid))

    async def encode(self, pcm: np.ndarray) -> list[bytes]:
        if len(pcm) == 0:
            return []
        return await self._call("encode", pcm, self.needed_by() if self.needed_by else None)

    async def flush(self) -> list[bytes]:
        return await self._call("flush", None)

    def close(self) -> None:
        self._closer()

    async def _call(
        self, op: str, pcm: np.ndarray | None, needed_by: float | None = None
    ) -> list[bytes]:
        frames, queued_s, run_s, hurried = await self._worker.call(op, self._eid, pcm, needed_by)
        if self._observe is not None:
            self._observe(max(0.0, queued_s), run_s, hurried)
        return frames


class PooledDecoder:
    """A session's microphone decoder in a worker process (CodecWorkers.open_decoder): Opus
    packets to float32 PCM at `rate`, its state kept there across the session's packets."""

    def __init__(self, worker: _Worker, did: int, rate: int) -> None:
        self.rate = rate
        self._worker = worker
        self._did = did
        self._closer = weakref.finalize(self, worker.post, ("close", did))

    def decode(self, packets: list[bytes]) -> asyncio.Future:
        """Packets in order, one call; resolves to what `decoded` reads, or raises
        CodecProcessFailed (the worker is gone)."""
        return self._worker.call("decode", self._did, packets)

    @staticmethod
    def decoded(result: tuple) -> tuple[np.ndarray, list[str]]:
        """A resolved decode: the packets' samples (float32) and why any packet was bad."""
        pcm, bad = result[0]
        return np.frombuffer(pcm, np.float32), bad

    def close(self) -> None:
        self._closer()


class CodecWorkers:
    """N encoder processes; `open` is an encoder factory like `audio.make_off_loop_encoder`."""

    def __init__(
        self,
        processes: int,
        restart_delay_s: float = RESTART_DELAY_S,
        role: WorkerRole | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"encode processes must be at least 1, got {processes}")
        self.processes = processes
        self.role = role or ENCODERS
        self.restart_delay_s = restart_delay_s
        self.restarts = 0  # successors started so far
        self._workers: list[_Worker] = []
        self._ids = itertools.count()
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._closing = False
        self._deaths: dict[int, tuple[int, float]] = {}  # slot → (deaths in a row, last restart)
        self._ctx: mp.context.BaseContext | None = None

    def start(self) -> CodecWorkers:
        # spawn, not fork: the gateway's process has threads (and CUDA, in tests and embedders).
        self._ctx = mp.get_context("spawn")
        launched: list[_Worker] = []
        try:
            for i in range(self.processes):
                launched.append(_Worker(self._ctx, i, self._replace, self.role))
            for worker in launched:
                self._workers.append(worker.wait_started())
        except BaseException:
            for worker in launched[len(self._workers) :]:
                worker.process.terminate()  # launched but never started: no threads to stop
            self.close()  # the ones that did start
            raise
        log.info("%s in %d worker processes", self.role.purpose, self.processes)
        return self

    @property
    def alive(self) -> int:
        return sum(w.failure is None for w in self._workers)

    def _replace(self, dead: _Worker) -> None:
        """On the dead worker's reader thread: start a successor in its slot, after a pause."""
        if self._closing or self._ctx is None:
            return
        delay = self._restart_delay(dead.index)
        log.warning(
            "%s process %s exited; its calls failed; a successor starts in %.0f s",
            self.role.kind,
            dead.name,
            delay,
        )
        time.sleep(delay)
        if self._closing:
            return
        try:
            successor = _Worker(self._ctx, dead.index, self._replace, self.role).wait_started()
        except Exception as exc:  # cannot start one: the slot stays empty, the others serve
            log.error("could not restart %s process %s: %s", self.role.kind, dead.name, exc)
            return
        with self._lock:
            if self._closing:
                successor.stop(1.0)
                return
            self._workers[dead.index] = successor
            self.restarts += 1

    def _restart_delay(self, slot: int) -> float:
        now = time.monotonic()
        deaths, last = self._deaths.get(slot, (0, -RESTART_WINDOW_S))
        deaths = deaths + 1 if now - last < RESTART_WINDOW_S else 1
        delay = min(MAX_RESTART_DELAY_S, self.restart_delay_s * 2 ** (deaths - 1))
        self._deaths[slot] = (deaths, now + delay)
        return delay

    def open(
        self,
        spec: AudioSpec,
        source_rate: int,
        opus_bitrate: int = 32000,
        observe: EncodeObserver | None = None,
        hurry_after_s: float | None = None,
    ) -> PooledEncoder:
        worker = self._next_worker()
        eid = next(self._ids)
        worker.post(("open", eid, spec, source_rate, opus_bitrate, hurry_after_s))
        return PooledEncoder(worker, eid, spec, source_rate, observe)

    def open_decoder(self, rate: int) -> PooledDecoder:
        """A microphone's Opus decoder to `rate` Hz (one of opus_lib.NATIVE_RATES)."""
        worker = self._next_worker()
        did = next(self._ids)
        worker.post(("open_decoder", did, rate))
        return PooledDecoder(worker, did, rate)

    def _next_worker(self) -> _Worker:
        alive = [w for w in self._workers if w.failure is None]
        if not alive:
            raise CodecProcessFailed(
                f"no {self.role.kind} process is running (successors are starting; if this "
                f"persists, see the server log, or serve with {self.role.option} 0)"
            )
        return alive[next(self._turn) % len(alive)]

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            self._closing = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop(timeout_s)
