"""Where detokenizer work runs: inline (CPU), or on a thread and CUDA stream of its own so
that the codec decodes step n's chunks while the LLM computes step n+1.

A job snapshots the tokens it covers on the engine thread; only the model's decode runs
elsewhere. One job is in flight at a time (the engine submits only when `in_flight` is 0), so a request's stream state is never
touched by two threads at once, its chunks come back in order, and the engine picks each job's
requests by priority when the codec is free rather than queueing jobs first come first served.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from engine.request import Request
from models.base import SpeechModel, StreamState


@dataclass
class DetokJob:
    requests: list[Request]
    states: list[StreamState]
    new_tokens: list[list[int]]
    final: list[bool]
    audio: list[np.ndarray] | None = None
    seconds: float = 0.0  # decode wall time, for the scheduler's estimate
    error: BaseException | None = None


def run_job(model: SpeechModel, job: DetokJob, clock) -> DetokJob:
    start = clock()
    with torch.inference_mode():
        job.audio = model.detokenize(job.states, job.new_tokens, job.final)
    job.seconds = clock() - start
    return job


class InlineDetokenizer:
    """Runs each job at once on the caller's thread (CPU engines)."""

    def __init__(self, model: SpeechModel, clock) -> None:
        self.model = model
        self.clock = clock
        self._done: list[DetokJob] = []

    @property
    def in_flight(self) -> int:
        return 0

    def submit(self, job: DetokJob) -> None:
        self._done.append(run_job(self.model, job, self.clock))

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        pass


class ThreadedDetokenizer:
    """One worker thread with its own CUDA stream."""

    def __init__(self, model: SpeechModel, clock, device: torch.device) -> None:
        self.model = model
        self.clock = clock
        self.device = device
        self._jobs: queue.SimpleQueue[DetokJob | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[DetokJob] = queue.SimpleQueue()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="voxgate-detok", daemon=True)
        self._thread.start()

    @property
    def in_flight(self) -> int:
        return self._pending

    def submit(self, job: DetokJob) -> None:
        self._pending += 1
        self._jobs.put(job)

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        done = []
        try:
            if wait_s > 0 and self._pending:
                done.append(self._done.get(timeout=wait_s))
            while True:
                done.append(self._done.get_nowait())
        except queue.Empty:
            pass
        self._pending -= len(done)
        return done

    def close(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(stream):
            while (job := self._jobs.get()) is not None:
                try:
                    run_job(self.model, job, self.clock)
                    stream.synchronize()
                except BaseException as exc:  # reported on the engine thread, never lost
                    job.error = exc
                self._done.put(job)
