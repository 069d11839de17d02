"""A detokenizer job and the interface the engine core drives (engine/detok_pipeline.py picks an
implementation: inline on the engine thread, or engine/detok_threads.py's worker threads).

A job snapshots on the engine thread the tokens each of its requests produced since its last
chunk; only the model's decode runs elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from engine.request import Request
from models.base import StreamState, Token

log = logging.getLogger("voxgate.detok")


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
    started: float | None = None  # when the codec began it (engine clock)


def run_job(codec: Codec, job: DetokJob, clock) -> DetokJob:
    job.started = start = clock()
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

    @property
    def has_lane(self) -> bool:
        """Whether first chunks have a lane at all (busy or not)."""
        return False

    def submit(self, job: DetokJob) -> None:
        raise NotImplementedError

    def submit_lane(self, job: DetokJob) -> None:
        raise RuntimeError("this detokenizer has no first-chunk lane")

    def poll(self, wait_s: float = 0.0) -> list[DetokJob]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def graph_capture(
    codec, device: torch.device, paced: bool = False, compiled: bool = False
) -> Callable[[], None]:
    """Capture `codec`'s CUDA graphs with a CallableGraphs of their own (their own memory
    pool), run on the worker thread that replays them: a thread's own cuBLAS handle gives its
    graphs a cuBLAS workspace of their own. Graphs captured on one thread share the workspace
    of its handle and torch's one default capture stream, and two of them replayed at once on
    two streams (steady and lane, or the LLM's decode step beside a codec job) would race in
    it. `paced`: the graphs' `pace` waits between the graphs of a job (CallableGraphs.pace);
    `compiled`: the blocks the codec names go through torch.compile first (CallableGraphs.compile_regions)."""

    def capture() -> None:
        from engine.cuda_graphs import CallableGraphs

        graphs = CallableGraphs(device, paced, compiled)
        codec.enable_cuda_graphs(graphs)
        if compiled and graphs.compiled_blocks == 0:
            log.info(
                "compile-codec: %s's graphs run no compiled blocks (it names none, or "
                "compiling failed: see the warning above)", type(codec).__name__,
            )  # fmt: skip

    return capture
