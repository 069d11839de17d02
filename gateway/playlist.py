"""A session's responses, in order: the one playing and the ones waiting behind it.

`text` events land here. The newest response takes text while its input is open; text after a
`final` opens the next response, which plays when the current one is done (responses never
overlap: one voice, one playback timeline). A barge-in stops the current response (the
playing one, else the first waiting) and drops the ones waiting behind it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid

from engine.api import EngineClient
from gateway.audio import OpenEncoder
from gateway.config import GatewaySettings
from gateway.metrics import GatewayMetrics
from gateway.protocol import ErrorCode, ErrorEvent, TextInput
from gateway.reply import Emitter, SpeechOptions
from gateway.response import Response, ResponseRunner
from gateway.segmenter import SentenceSegmenter
from gateway.tasks import cancel_and_wait


class ResponseQueue:
    def __init__(
        self,
        engine: EngineClient,
        settings: GatewaySettings,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        log: logging.LoggerAdapter,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._emit = emit
        self._metrics = metrics
        self._open_encoder = open_encoder
        self._log = log
        self._waiting: collections.deque[Response] = collections.deque()
        self._ready = asyncio.Event()
        self._runner: ResponseRunner | None = None
        self._runner_task: asyncio.Task | None = None
        self.opened = 0
        self.last_played = time.monotonic()
        self.options = SpeechOptions()  # session.start replaces it

    @property
    def busy(self) -> bool:
        """A response is playing or waiting (the session is not idle)."""
        return self._runner is not None or bool(self._waiting)

    # --- from the reader -------------------------------------------------------------------
    def add_text(self, event: TextInput) -> None:
        s = self._settings
        if len(event.text) > s.max_text_chars:
            self._error(
                ErrorCode.TOO_LARGE, f"one text event is limited to {s.max_text_chars} characters"
            )
            return
        response = self._open_response()
        if response is not None and event.overrides is not None:
            self._error(
                ErrorCode.BAD_FIELD,
                "a response's own options (model_options) apply to all of it: send them with "
                "the text that opens it (this text was not added)",
            )
            return
        if response is None:
            if not event.text.strip():
                self._error(ErrorCode.BAD_FIELD, "`text` is empty")
                return
            behind = len(self._waiting) + (self._runner is not None) - 1  # behind the one playing
            if behind >= s.max_queued_responses:
                self._error(
                    ErrorCode.RATE_LIMITED, f"at most {s.max_queued_responses} responses may wait"
                )
                return
            response = self._new_response()
            response.overrides = event.overrides
        if response.text_chars + len(event.text) > s.max_response_text_chars:
            self._error(
                ErrorCode.TOO_LARGE,
                f"a response is limited to {s.max_response_text_chars} characters",
            )
            return
        response.add_text(event.text, event.final)

    def report_playback(self, played_ms: float) -> None:
        if self._runner is not None:
            self._runner.report_playback(played_ms)

    async def cancel(self) -> None:
        """Barge-in: stop the current response and drop the ones waiting behind it. The
        current one is the playing one or, when the player has not taken it up yet, the first
        one waiting; either way the client gets its `response.started` and `response.done`
        cancelled (it opened it), and its engine requests are freed. A no-op when none is open."""
        runner, task = self._runner, self._runner_task
        playing = runner is not None and task is not None and not task.done()
        if not playing and self._waiting:
            self._runner_for(self._waiting.popleft()).end_unplayed()
        self._waiting.clear()
        if not playing:
            return
        runner.cancel()
        if runner.started:
            task.cancel()  # its `run` answers with `response.done`
        # A `run` not started yet sees the cancel when it starts and ends at once; cancelling
        # its task now would end it before its first line, with no word to the client.
        await asyncio.wait({task})

    async def stop(self) -> None:
        """Session teardown: free everything, tell the client nothing."""
        self._waiting.clear()
        await cancel_and_wait(self._runner_task)  # its `finally` cancels the engine requests

    # --- the player task -------------------------------------------------------------------
    async def play(self) -> None:
        """Play responses as they come, until cancelled. Raises what a runner raised
        (SendQueueFull, bugs) and EngineDead once the engine has died."""
        while True:
            while not self._waiting:
                self._ready.clear()
                await self._ready.wait()
            response = self._waiting.popleft()
            self._runner = self._runner_for(response)
            self._runner_task = asyncio.create_task(self._runner.run())
            try:
                # Not `await task`: a barge-in cancels the runner, not this loop.
                await asyncio.wait({self._runner_task})
                if not self._runner_task.cancelled() and self._runner_task.exception():
                    raise self._runner_task.exception()  # EngineDead among them
            finally:
                self._runner = None
                self.last_played = time.monotonic()

    # --- helpers ---------------------------------------------------------------------------
    def _open_response(self) -> Response | None:
        """The response that text now appends to: the newest one, while its input is open."""
        if self._waiting:
            newest = self._waiting[-1]
        elif self._runner is not None:
            newest = self._runner.response
        else:
            return None
        return None if newest.input_closed else newest

    def _runner_for(self, response: Response) -> ResponseRunner:
        options = self.options
        if response.overrides is not None:  # laid over the options in force as it starts
            options = response.overrides.over(options)
        return ResponseRunner(
            response,
            self._engine,
            self._settings,
            options,
            self._emit,
            self._metrics,
            self._open_encoder,
            self._log,
        )

    def _new_response(self) -> Response:
        s = self._settings
        self.opened += 1
        response = Response(
            f"resp_{uuid.uuid4().hex[:12]}",
            SentenceSegmenter(s.min_segment_chars, s.max_segment_chars),
            appends_text=self._engine.facts.appends_text,
        )
        self._waiting.append(response)
        self._ready.set()
        return response

    def _error(self, code: ErrorCode, message: str) -> None:
        self._emit.event(ErrorEvent(code, message, fatal=False))
