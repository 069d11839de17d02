"""Where detokenizer work runs: inline (CPU), or on a thread and CUDA stream of its own so
that the codec decodes step n's chunks while the LLM computes step n+1.

A job snapshots the tokens it covers on the engine thread; only the model's decode runs
elsewhere. One steady job is in flight at a time (the engine submits only when
`steady_in_flight` is 0), so the engine picks each job's requests by priority when the codec
is free rather than queueing jobs first come first served.

First-chunk lane (models with ModelFacts.first_chunk_lane, on CUDA): a second worker thread
with its own high-priority CUDA stream and its own detokenizer context (LaneCodec: CUDA graphs
and graph memory of its own) decodes requests' FIRST chunks while a steady job runs, one lane
job at a time, so time to first audio never waits behind a steady job. A request is in at
most one job (Request.detok_in_flight), so its stream state is never touched by two threads at
once and its chunks come back in order; after a lane job its states' memory is handed over to
the steady stream (LaneCodec.hand_over).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from engine.config import EngineConfig
from engine.request import Request
from models.base import LaneCodec, SpeechModel, StreamState, Token

log = logging.getLogger("voxgate.engine")

# CUDA stream priority of the lane (lower is higher; torch clamps it to the device's range).
LANE_STREAM_PRIORITY = -1


class Codec(Protocol):
    """What runs a job: the model (SpeechModel.detokenize) or its LaneCodec."""

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]: ...


@dataclass
class DetokJob:
    requests: list[Request]
    states: list[StreamState]
    new_tokens: list[list[int]]
    final: list[bool]
    audio: list[np.ndarray] | None = None
    seconds: float = 0.0  # decode wall time, for the scheduler's estimate
    error: BaseException | None = None
    lane: bool = False  # a first-chunk lane job (else a steady one)


def run_job(codec: Codec, job: DetokJob, clock) -> DetokJob:
    start = clock()
    with torch.inference_mode():
        job.audio = codec.detokenize(job.states, job.new_tokens, job.final)
    job.seconds = clock() - start
    return job


class Detokenizer:
    """The interface the engine core drives. `in_flight` counts every job not yet polled;
    `steady_in_flight` the steady ones; `lane_room` is how many first chunks a lane job may
    take now (0: no lane, or its job is in flight)."""

    @property
    def in_flight(self) -> int:
        return 0

    @property
    def steady_in_flight(self) -> int:
        return self.in_flight

    @property
    def lane_room(self) -> int:
        return 0

    def submit(self, job: DetokJob) -> None:
        raise NotImplementedError

    def submit_lane(self, job: DetokJob) -> None:
        raise RuntimeError("this detokenizer has no first-chunk lane")

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class InlineDetokenizer(Detokenizer):
    """Runs each job at once on the caller's thread (CPU engines)."""

    def __init__(self, model: Codec, clock) -> None:
        self.model = model
        self.clock = clock
        self._done: list[DetokJob] = []

    def submit(self, job: DetokJob) -> None:
        self._done.append(run_job(self.model, job, self.clock))

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        done, self._done = self._done, []
        return done


class _CodecThread:
    """One worker thread (with its own CUDA stream on a GPU) running jobs in order."""

    def __init__(
        self,
        codec: Codec,
        clock,
        device: torch.device,
        done: queue.SimpleQueue,
        name: str,
        priority: int = 0,
        setup: Callable[[], None] | None = None,
    ) -> None:
        self.codec = codec
        self.clock = clock
        self.stream = (
            torch.cuda.Stream(device, priority=priority) if device.type == "cuda" else None
        )
        self.hand_over_to: Any = None  # the lane's: the steady thread's stream
        self._jobs: queue.SimpleQueue[DetokJob | None] = queue.SimpleQueue()
        self._done = done
        self._setup = setup
        self._ready = threading.Event()
        self._setup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._setup_error is not None:
            raise self._setup_error

    def submit(self, job: DetokJob) -> None:
        self._jobs.put(job)

    def close(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        on_stream = nullcontext() if self.stream is None else torch.cuda.stream(self.stream)
        with on_stream:
            try:
                if self._setup is not None:
                    self._setup()
            except BaseException as exc:  # raised by the constructor, on the engine thread
                self._setup_error = exc
                return
            finally:
                self._ready.set()
            while (job := self._jobs.get()) is not None:
                try:
                    run_job(self.codec, job, self.clock)
                    if self.stream is not None:
                        self.stream.synchronize()
                    if self.hand_over_to is not None:
                        self.codec.hand_over(job.states, self.hand_over_to)
                except BaseException as exc:  # reported on the engine thread, never lost
                    job.error = exc
                self._done.put(job)


class ThreadedDetokenizer(Detokenizer):
    """Steady jobs on one worker thread and CUDA stream; with a `lane` codec, first-chunk jobs
    on a second thread and high-priority stream. Finished jobs of both come back through one
    queue, so the engine can wait for whichever ends first."""

    def __init__(
        self,
        model: Codec,
        clock,
        device: torch.device,
        lane: LaneCodec | None = None,
        capture_graphs: bool = False,
    ) -> None:
        self.model = model
        self.clock = clock
        self.device = device
        self._done: queue.SimpleQueue[DetokJob] = queue.SimpleQueue()
        self._pending = {False: 0, True: 0}  # jobs in flight by DetokJob.lane
        self._steady = _CodecThread(
            model,
            clock,
            device,
            self._done,
            "voxgate-detok",
            setup=_graph_capture(model, device) if capture_graphs else None,
        )
        self.lane = lane
        self._lane = None
        if lane is not None:
            self._lane = _CodecThread(
                lane,
                clock,
                device,
                self._done,
                "voxgate-detok-lane",
                LANE_STREAM_PRIORITY,
                setup=_graph_capture(lane, device) if capture_graphs else None,
            )
            self._lane.hand_over_to = self._steady.stream

    @property
    def in_flight(self) -> int:
        return self._pending[False] + self._pending[True]

    @property
    def steady_in_flight(self) -> int:
        return self._pending[False]

    @property
    def lane_room(self) -> int:
        if self.lane is None or self._pending[True]:
            return 0
        return self.lane.max_rows

    def submit(self, job: DetokJob) -> None:
        job.lane = False
        self._pending[False] += 1
        self._steady.submit(job)

    def submit_lane(self, job: DetokJob) -> None:
        if self._lane is None:
            super().submit_lane(job)
        job.lane = True
        self._pending[True] += 1
        self._lane.submit(job)

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        done = []
        try:
            if wait_s > 0 and self.in_flight:
                done.append(self._done.get(timeout=wait_s))
            while True:
                done.append(self._done.get_nowait())
        except queue.Empty:
            pass
        for job in done:
            self._pending[job.lane] -= 1
        return done

    def close(self) -> None:
        self._steady.close()
        if self._lane is not None:
            self._lane.close()


def _graph_capture(codec, device: torch.device) -> Callable[[], None]:
    """Capture `codec`'s CUDA graphs with a CallableGraphs of their own (their own memory
    pool), run on the worker thread that replays them: a thread's own cuBLAS handle gives its
    graphs a cuBLAS workspace of their own. Graphs captured on one thread share the workspace
    of its handle and torch's one default capture stream, and two of them replayed at once on
    two streams (steady and lane, or the LLM's decode step beside a codec job) would race in
    it."""

    def capture() -> None:
        from engine.cuda_graphs import CallableGraphs

        codec.enable_cuda_graphs(CallableGraphs(device))

    return capture


def make_detokenizer(
    model: SpeechModel, config: EngineConfig, clock, device: torch.device, threaded: bool
) -> Detokenizer:
    """Inline, or threaded with the model's first-chunk lane when the model offers one
    (ModelFacts.first_chunk_lane) and config.first_chunk_lane allows it. On CUDA with graphs,
    each codec's graphs are captured here (_graph_capture), the steady one's then the lane's."""
    graphs = device.type == "cuda" and config.cuda_graphs
    if not threaded:
        if graphs:
            _graph_capture(model, device)()
        return InlineDetokenizer(model, clock)
    lane = None
    if config.first_chunk_lane and model.facts.first_chunk_lane:
        lane = model.first_chunk_lane_codec()
    if lane is not None:
        log.info("first-chunk detokenizer lane on (up to %d first chunks a job)", lane.max_rows)
    return ThreadedDetokenizer(model, clock, device, lane, capture_graphs=graphs)
