"""Transcripts of the user's spoken turns (the Realtime API's input audio transcription).

A speech-to-speech model hears the user's speech as tokens and writes no transcript of it, so
the gateway transcribes each committed turn itself, with a Whisper model run by faster-whisper
(CTranslate2, int8) on the CPU, beside the served model: `voxgate serve
--input-transcription-model NAME` (a faster-whisper model name such as `base.en` or
`large-v3`, fetched once from the Hugging Face Hub, or a local folder in its format; needs
`pip install 'voxgate[transcription]'`). A session asks for transcripts with the Realtime API's
`input_audio_transcription` (GA: `audio.input.transcription`); the transcript arrives after
the turn is committed, independently of the reply (gateway/turns.py).

One transcription runs at a time, in a thread of its own (CTranslate2 releases the GIL): under
many sessions the transcripts queue behind each other, the replies do not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass

import numpy as np

from engine.api import ConfigError

MAX_PROMPT_CHARS = 1024  # a transcription prompt (Whisper's initial prompt): 224 tokens at most


@dataclass(frozen=True)
class InputTranscription:
    """What a session asked transcripts of its spoken turns with: the model it named (shown
    back as given: the server transcribes with its own), the language of the speech (None:
    detected) and a prompt of words to expect."""

    model: str
    language: str | None = None
    prompt: str | None = None


# The update that turns a session's transcription off (SessionUpdate.input_transcription).
NO_TRANSCRIPTION = InputTranscription("")


class InputTranscriber:
    """The server's transcription model. Raises ConfigError where it cannot be loaded."""

    def __init__(self, model: str, threads: int = 2) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise ConfigError(
                "--input-transcription-model needs faster-whisper: "
                "pip install 'voxgate[transcription]'"
            ) from None
        try:
            self._model = WhisperModel(
                model, device="cpu", compute_type="int8", cpu_threads=threads
            )
        except Exception as exc:  # a name the Hub does not know, a folder of something else, …
            raise ConfigError(
                f"--input-transcription-model {model!r} could not be loaded ({exc}): give a "
                "faster-whisper model name such as base.en, or a folder of one"
            ) from None
        self.model = model
        self._pool = concurrent.futures.ThreadPoolExecutor(1, "voxgate-transcribe")

    async def transcribe(self, pcm_16k: np.ndarray, asked: InputTranscription) -> str:
        """The words of one turn's audio (float32 mono, 16 kHz)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._transcribe, pcm_16k, asked)

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
        self._pool.shutdown(wait=False, cancel_futures=True)
