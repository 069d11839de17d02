"""Transcripts of the user's spoken turns (the Realtime API's input audio transcription).

A speech-to-speech model hears the user's speech as tokens and writes no transcript of it, so
the gateway transcribes each committed turn itself, with a Whisper model run by faster-whisper
(CTranslate2, int8) on the CPU, beside the served model: `voxgate serve
--input-transcription-model NAME` (a faster-whisper model name such as `base.en` or
`large-v3`, fetched once from the Hugging Face Hub, or a local folder in its format; needs
`pip install 'voxgate[transcription]'`). A session asks for transcripts with the Realtime API's
`input_audio_transcription` (GA: `audio.input.transcription`); the transcript arrives after
the turn is committed, independently of the reply (gateway/turns.py).

Transcriptions run in a few threads of their own (CTranslate2 releases the GIL; faster-whisper
runs one at a time per worker, so the model gets as many workers as threads): a quarter of the
machine's cores, two threads each, 1 to 4 workers. Beyond `BACKLOG_PER_WORKER` turns waiting
for each, a turn gets no transcript (its `.failed` event says the transcriber is busy) rather
than one that comes ever later: under many sessions transcripts must not queue without bound.
The replies never wait for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_PROMPT_CHARS = 1024  # a transcription prompt (Whisper's initial prompt): 224 tokens at most
MAX_WORKERS = 4
THREADS_PER_WORKER = 2
# Turns that may wait for each worker: a few seconds of transcripts at a turn's ~0.3-1 s.
BACKLOG_PER_WORKER = 8


@dataclass(frozen=True)
class InputTranscription:
    """What a session asked transcripts of its spoken turns with: the model it named (shown
    back as given: the server transcribes with its own; None: none named), the language of the
    speech (None: detected) and a prompt of words to expect."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None


# The update that turns a session's transcription off (SessionUpdate.input_transcription).
NO_TRANSCRIPTION = InputTranscription("")

_LANGUAGE = re.compile(r"^[a-z]{2,3}$")  # an ISO-639-1 (or -3) code, as Whisper takes them


class TranscriptionRefused(ValueError):
    """A transcription request's field that cannot be taken; `path` names it."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def checked_transcription(value: Any, path: str, model_required: bool) -> InputTranscription:
    """A client's transcription object → InputTranscription: `model` (a name, optional unless
    `model_required`), `language` (ISO-639-1; none: detected) and `prompt`. Raises
    TranscriptionRefused."""
    if not isinstance(value, dict):
        raise TranscriptionRefused("`transcription` must be an object or null", path)
    named = value.get("model")
    if (named is not None or model_required) and (not isinstance(named, str) or not named):
        raise TranscriptionRefused("`transcription.model` must be a model name", f"{path}.model")
    language = value.get("language")
    if language is not None and (not isinstance(language, str) or not _LANGUAGE.match(language)):
        raise TranscriptionRefused(
            "`transcription.language` must be a language code such as en", f"{path}.language"
        )
    prompt = value.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS):
        raise TranscriptionRefused(
            f"`transcription.prompt` must be a string of at most {MAX_PROMPT_CHARS} characters",
            f"{path}.prompt",
        )
    return InputTranscription(named, language or None, prompt or None)


class TranscriberBusy(RuntimeError):
    """More turns wait for the transcriber than its backlog takes."""


def default_workers(cores: int | None = None) -> int:
    """A quarter of the machine's cores (`cores`: os.cpu_count()), 1 to MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, (cores or os.cpu_count() or 1) // 4))


class TranscriptionPool:
    """Runs transcriptions in `workers` threads, with at most `backlog` waiting beyond those
    running: one more raises TranscriberBusy at once. No torch, no model: the caller's
    function does the work."""

    def __init__(self, workers: int, backlog: int) -> None:
        self.workers = workers
        self.backlog = backlog
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, "voxgate-transcribe")
        self._in_flight = 0  # submitted and not done: running or waiting (the event loop's)

    async def run(self, work: Callable[[], str]) -> str:
        if self._in_flight >= self.workers + self.backlog:
            raise TranscriberBusy(
                f"the server's transcriber is busy ({self._in_flight} turns ahead): this turn "
                "has no transcript"
            )
        self._in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work)
        finally:
            self._in_flight -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class InputTranscriber:
    """The server's transcription model. Raises ConfigError where it cannot be loaded."""

    def __init__(self, model: str, workers: int | None = None) -> None:
        workers = workers or default_workers()
        from engine.api import ConfigError  # here: the protocol's clients import this module

        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise ConfigError(
                "--input-transcription-model needs faster-whisper: "
                "pip install 'voxgate[transcription]'"
            ) from None
        try:
            self._model = WhisperModel(
                model,
                device="cpu",
                compute_type="int8",
                cpu_threads=THREADS_PER_WORKER,
                num_workers=workers,
            )
        except Exception as exc:  # a name the Hub does not know, a folder of something else, …
            # Imported here: the client package imports this module's vocabulary, never models.
            from models.checkpoint_errors import one_line

            raise ConfigError(
                f"--input-transcription-model {model!r} could not be loaded "
                f"({one_line(str(exc))}): give a "
                "faster-whisper model name such as base.en (fetched from the Hugging Face Hub, "
                "which this machine must reach the first time), or a folder of one"
            ) from None
        self._pool = TranscriptionPool(workers, BACKLOG_PER_WORKER * workers)

    async def transcribe(self, pcm_16k: np.ndarray, asked: InputTranscription) -> str:
        """The words of one turn's audio (float32 mono, 16 kHz); TranscriberBusy when too
        many turns wait already."""
        return await self._pool.run(lambda: self._transcribe(pcm_16k, asked))

    def _transcribe(self, pcm_16k: np.ndarray, asked: InputTranscription) -> str:
        segments, _ = self._model.transcribe(
            np.asarray(pcm_16k, np.float32),
            language=asked.language,
            initial_prompt=asked.prompt,
            beam_size=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()

    def close(self) -> None:
        self._pool.close()
