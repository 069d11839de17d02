"""The CUDA detokenizer: jobs run on worker threads, each with a CUDA stream of its own, so that
the codec decodes step n's chunks while the LLM computes step n+1 (engine/detok_job.py has
what a job is and the interface the engine core drives).

One steady job is in flight at a time (the engine submits only when `steady_in_flight` is 0),
so the engine picks each job's requests by priority when the codec is free rather than queueing
jobs first come first served.

First-chunk lane (models with ModelFacts.first_chunk_lane): a second worker thread with its own
high-priority CUDA stream and its own detokenizer context (LaneCodec: CUDA graphs and graph
memory of its own) decodes requests' FIRST chunks while a steady job runs, one lane job at a
time, so time to first audio never waits behind a steady job; and chunks whose listener would
run dry waiting for the steady job (Scheduler.lane_urgent). A request is in at most one job
(Request.detok_in_flight), so its stream state is never touched by two threads at once and its
chunks come back in order; its states' memory is handed to each stream that goes on to use it
(LaneCodec.hand_over), before a lane job and after it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from engine.detok_job import Codec, Detokenizer, DetokJob, graph_capture, run_job
from models.base import LaneCodec

# CUDA stream priority of the lane (lower is higher; torch clamps it to the device's range):
# above the steady job (0), below the LLM's steps (engine/llm_stream.py) where the device has
# that many levels.
LANE_STREAM_PRIORITY = -1


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
        # On a GPU: a stream of its own.
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

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop after the job in hand. Joined, so that the interpreter never exits with the
        thread inside a torch call (which aborts the process: "terminate called without an
        active exception")."""
        self._jobs.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

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
                    if self.hand_over_to is not None:
                        # The lane continues streams the steady job began too (urgent chunks):
                        # what it frees of their memory, made on the steady stream, must not
                        # be reused there before this stream has read it.
                        self.codec.hand_over(job.states, self.stream)
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
    queue, so the engine can wait for whichever ends first.

    `paced`: both threads wait between the graphs of a job (CallableGraphs.pace); `compiled`:
    their graphs capture Inductor's kernels in the blocks the codec names for it
    (CallableGraphs.compile_regions)."""

    def __init__(
        self,
        model: Codec,
        clock,
        device: torch.device,
        lane: LaneCodec | None = None,
        capture_graphs: bool = False,
        paced: bool = False,
        compiled: bool = False,
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
            setup=graph_capture(model, device, paced, compiled) if capture_graphs else None,
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
                setup=graph_capture(lane, device, paced, compiled) if capture_graphs else None,
            )
            self._lane.hand_over_to = self._steady.stream

    @property
    def in_flight(self) -> int:
        return self._pending[False] + self._pending[True]

    @property
    def steady_in_flight(self) -> int:
        return self._pending[False]

    @property
    def has_lane(self) -> bool:
        return self.lane is not None

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
