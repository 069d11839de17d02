"""Where detokenizer work runs: inline on the engine thread (CPU engines), or on worker threads
with CUDA streams of their own (engine/detok_threads.py: the steady job and the first-chunk
lane), so that the codec decodes step n's chunks while the LLM computes step n+1.
`make_detokenizer` picks one for an engine; engine/detok_job.py has the job and the interface.
"""

from __future__ import annotations

import logging

import torch

from engine.config import EngineConfig
from engine.detok_job import Codec, Detokenizer, DetokJob, graph_capture, run_job
from engine.detok_threads import ThreadedDetokenizer
from models.base import SpeechModel

log = logging.getLogger("voxgate.engine")


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


def make_detokenizer(
    model: SpeechModel, config: EngineConfig, clock, device: torch.device, threaded: bool
) -> Detokenizer:
    """Inline, or threaded with the model's first-chunk lane when the model serves with one
    (ModelFacts.first_chunk_lane). On CUDA with graphs, each codec's graphs are captured here
    (graph_capture), the steady one's then the lane's, paced and compiled as the model's facts
    say (ModelFacts.codec_pacing, compile_codec)."""
    graphs = device.type == "cuda" and config.cuda_graphs
    facts = model.facts
    if not threaded:
        if graphs:
            graph_capture(model, device, compiled=facts.compile_codec)()
        return InlineDetokenizer(model, clock)
    lane = model.first_chunk_lane_codec() if facts.first_chunk_lane else None
    if lane is not None:
        log.info("first-chunk detokenizer lane on (up to %d first chunks a job)", lane.max_rows)
    return ThreadedDetokenizer(
        model,
        clock,
        device,
        lane,
        capture_graphs=graphs,
        paced=facts.codec_pacing,
        compiled=facts.compile_codec,
    )
