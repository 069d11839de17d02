"""What every per-request baseline (docs/benchmarking.md) shares: the engine surface the gateway
drives (`facts`, `ready`, `start`, `submit` → event stream, `cancel`, `report_playback`,
`stats`, `shutdown`) over a FIFO of requests that one worker thread serves one at a time, the
way a model card's example code runs. A model's baseline says how to build a prompt
(`prompt_ids`, or `request_prompt` where the request's model options shape it too) and how to
generate one request (`_generate`): voxbench/hf_baseline.py (Orpheus: transformers `generate`
+ SNAC), voxbench/cosyvoice_baseline.py, voxbench/qwen3_tts_baseline.py,
voxbench/zonos_baseline.py and voxbench/chatterbox_baseline.py."""

from __future__ import annotations

import abc
import asyncio
import collections
import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from engine.api import (
    EngineStats,
    Finished,
    FinishReason,
    ModelFacts,
    ResponseStream,
    SamplingParams,
    SpeechRequest,
    StepTiming,
)

log = logging.getLogger("voxgate.bench.baseline")

_ids = itertools.count()


@dataclass(eq=False)
class Job:
    request_id: str
    prompt: list[Any]  # token ids; rows of them (a column a codebook) for multi-codebook models
    sampling: SamplingParams
    stream: ResponseStream
    voice: str | None = None
    cancelled: bool = False
    # The request's model options (SpeechRequest.model_options) as the client gave them, for a
    # baseline whose options act while it generates (Chatterbox's cfg_weight), not only on the
    # prompt.
    model_options: dict[str, Any] = field(default_factory=dict)


class PerRequestBaseline(abc.ABC):
    facts: ModelFacts

    def __init__(self) -> None:
        self._queue: collections.deque[Job] = collections.deque()
        self._jobs: dict[str, Job] = {}
        self._cv = threading.Condition()
        self._current: Job | None = None
        self._thread: threading.Thread | None = None
        self._stop = False
        self._tokens = 0

    @abc.abstractmethod
    def prompt_ids(self, text: str, voice: str | None) -> list[Any]:
        """The request's prompt; ModelInputError for text or a voice it cannot take."""

    def request_sampling(self, request: SpeechRequest) -> SamplingParams:
        """The sampling `request` runs with: its own, or within the model's length rule for
        its text where the model has one (models.base.Prompt.length), as the engine does."""
        return request.sampling

    def request_prompt(self, request: SpeechRequest) -> list[Any]:
        """The prompt of `request`: prompt_ids of its text and voice. A model whose request
        options (SpeechRequest.model_options) change the prompt builds it here instead."""
        return self.prompt_ids(request.text, request.voice)

    @abc.abstractmethod
    def _generate(self, job: Job) -> tuple[FinishReason, int]:
        """Generate `job` on the worker thread, pushing its AudioChunks to job.stream as they
        come; stop early once job.cancelled. Returns (why it ended, tokens generated)."""

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="baseline", daemon=True)
            self._thread.start()

    async def shutdown(self) -> None:
        with self._cv:
            self._stop = True
            for job in self._jobs.values():
                job.cancelled = True
            self._cv.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 30.0)
            self._thread = None

    @property
    def ready(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- commands --------------------------------------------------------------------------
    async def submit(self, request: SpeechRequest) -> ResponseStream:
        if not self.ready:
            raise RuntimeError("the baseline is not running")
        prompt = self.request_prompt(request)
        request_id = request.request_id or f"hf-{next(_ids)}"
        job = Job(
            request_id,
            prompt,
            self.request_sampling(request),
            ResponseStream(asyncio.get_running_loop(), request_id),
            request.voice,
            model_options=dict(request.model_options),
        )
        with self._cv:
            self._jobs[request_id] = job
            self._queue.append(job)
            self._cv.notify()
        return job.stream

    def cancel(self, request_id: str) -> None:
        with self._cv:
            job = self._jobs.get(request_id)
            if job is None:
                return
            job.cancelled = True  # the running one stops at its next token
            if job is not self._current:
                self._queue.remove(job)
                self._finish(job, FinishReason.CANCELLED, 0)

    def report_playback(self, request_id: str, played_s: float) -> None:  # noqa: B027
        """A per-request loop has no scheduler to tell."""

    def stats(self) -> EngineStats:
        busy = int(self._current is not None)
        return EngineStats(
            running=busy,
            waiting=len(self._queue),
            kv_blocks_total=1,
            kv_blocks_used=0,
            steps=self._tokens,
            last_step=StepTiming(batch_size=busy, num_tokens=busy),
            stepping=self.ready,
        )

    # --- the worker thread -----------------------------------------------------------------
    def _finish(
        self, job: Job, reason: FinishReason, tokens: int, error: str | None = None
    ) -> None:
        self._jobs.pop(job.request_id, None)
        job.stream.push(Finished(job.request_id, reason, tokens, error))

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stop:
                    self._cv.wait()
                if self._stop:
                    for job in list(self._jobs.values()):
                        self._finish(job, FinishReason.CANCELLED, 0)
                    return
                self._current = job = self._queue.popleft()
            error = None
            try:
                reason, tokens = self._generate(job)
            except Exception as exc:  # one bad request must not end the server
                log.exception("baseline generation failed")
                reason, tokens, error = FinishReason.FAILED, 0, f"{type(exc).__name__}: {exc}"
            self._tokens += tokens
            with self._cv:
                self._current = None
                self._finish(job, reason, tokens, error)
