"""The engine loop in a thread of the caller's process (`EngineClient`, engine/api.py).

The loop runs off the caller's event loop: model work releases the GIL inside torch, so the
gateway's Python keeps serving sockets while the GPU/CPU steps. Commands cross into the loop
through a queue and are applied between steps (engine/loop.py:apply); events cross back with
`loop.call_soon_threadsafe` (engine/client_base.py).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any

from engine.api import (
    AddClipVoice,
    Command,
    EngineDead,
    InstallClipVoice,
    ModelFacts,
    PendingVoice,
    ResponseStream,
    TurnCommand,
    TurnFromSpeech,
    VoiceClip,
)
from engine.client_base import ClientBase
from engine.loop import EngineLoop, apply
from engine.outputs import EngineStats

log = logging.getLogger("voxgate.engine")

__all__ = ["AsyncEngine", "ResponseStream"]


class AsyncEngine(ClientBase):
    def __init__(self, core: EngineLoop) -> None:
        super().__init__()
        self.core = core
        self.facts: ModelFacts = core.model.facts
        self._commands: queue.SimpleQueue[tuple[Command, int | None]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = False
        self.failure: BaseException | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="voxgate-engine", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10.0)
            self._thread = None
        self.core.close()
        self._fail_all("the engine was shut down")

    @property
    def ready(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    def stats(self) -> EngineStats:
        return self.core.stats(stepping=self.ready)

    async def prepare_turn(self, command: TurnCommand) -> Any:
        """Turn preparation touches the model alone, so it runs here, not on the engine thread:
        the speech tokenizer off the event loop (it is model work), the rest at once."""
        if not self.ready:
            raise EngineDead("the engine is not running")
        if isinstance(command, TurnFromSpeech):
            return (await asyncio.to_thread(apply, self.core, command)).value
        return apply(self.core, command).value

    async def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """Encoding a clip is model work: off the event loop, and off the engine thread. A
        voice the model hands back pending is put in place on the engine thread, between
        steps, as a queued command."""
        if not self.ready:
            raise EngineDead("the engine is not running")
        value = (await asyncio.to_thread(apply, self.core, AddClipVoice(name, clip))).value
        if isinstance(value, PendingVoice):
            try:
                value = await self._ask(InstallClipVoice(value))
            except asyncio.CancelledError:  # queued after the install: the voice does not stay
                self.remove_clip_voice(name)
                raise
        return value

    def _send(self, command: Command, token: int | None) -> None:
        self._commands.put((command, token))
        self._wake.set()

    # --- the loop (engine thread) ----------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop:
                self._apply_commands()
                if not self.core.has_work():
                    self._wake.wait(timeout=0.5)
                    self._wake.clear()
                    continue
                wait = self.core.seconds_until_due()  # full duplex: the next frame's tick
                if wait is not None and wait > 0:
                    self._wake.wait(timeout=min(wait, 0.5))
                    self._wake.clear()
                    continue
                self._deliver_all(self.core.step())
        except BaseException as exc:  # the loop must never die silently
            log.exception("engine loop failed")
            self.failure = exc
            self._fail_all(f"engine failure: {exc}")

    def _apply_commands(self) -> None:
        while True:
            try:
                command, token = self._commands.get_nowait()
            except queue.Empty:
                return
            # A caller that gave up waiting (its task was cancelled) must not get a request
            # it no longer owns.
            if token is not None and not self._wanted(token):
                continue
            try:
                applied = apply(self.core, command)
            except Exception as exc:  # handed to the caller, who reports it to its client
                self._refuse(token, exc)
                continue
            self._answer(token, applied)
