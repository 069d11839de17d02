"""A blocking wrapper over the async client, for scripts and notebooks: the session runs on an
event loop in a background thread, and each method waits for its coroutine there.

    from voxgate.client.sync import connect

    with connect("ws://127.0.0.1:8000/v1/stream") as session:
        reply = session.speak("Hello there.")
        print(reply.status, len(reply.pcm) / reply.sample_rate, "s")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

from voxgate.client.connect import connect as connect_async
from voxgate.client.events import Event, SessionInfo
from voxgate.client.reply import Reply
from voxgate.client.session import Session

T = TypeVar("T")


class SyncSession:
    """The blocking face of a `Session`: the same methods and attributes, the same errors.
    `speak` and `next_reply` wait for the whole response (a `Reply`, as `collect()` returns);
    `events` is a plain iterator."""

    def __init__(self, **connect_kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self._session: Session = self._call(_open(connect_kwargs))
        except BaseException:
            self._stop_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def info(self) -> SessionInfo:
        assert self._session.info is not None
        return self._session.info

    @property
    def closed(self) -> bool:
        return self._session.closed

    @property
    def close_code(self) -> int | None:
        """The close code once the session has closed (1000 after a normal end)."""
        return self._session.close_code

    def speak(self, text: str, extra: Mapping[str, Any] | None = None) -> Reply:
        """Speak `text` and wait for the whole response (ReplyStream.collect)."""
        return self._call(self._session.speak(text, extra).collect())

    def next_reply(self) -> Reply:
        return self._call(self._session.next_reply().collect())

    def send_event(self, event: Mapping[str, Any]) -> None:
        """Send one client event as it is (a JSON object with a `type`)."""
        self._call(self._session.send_event(event))

    def send_text(
        self, text: str, final: bool = True, extra: Mapping[str, Any] | None = None
    ) -> None:
        self._call(self._session.send_text(text, final, extra))

    def send_audio(self, frame: bytes) -> None:
        self._call(self._session.send_audio(frame))

    def send_pcm(self, pcm: np.ndarray, sample_rate: int) -> int:
        return self._call(self._session.send_pcm(pcm, sample_rate))

    def flush_audio(self) -> int:
        """Send the microphone audio still held back, padded to a whole frame."""
        return self._call(self._session.flush_audio())

    def commit(self) -> None:
        self._call(self._session.commit())

    def cancel(self) -> None:
        self._call(self._session.cancel())

    def report_playback(self, played_ms: float) -> None:
        self._call(self._session.report_playback(played_ms))

    def next_event(self, timeout: float | None = None) -> Event:
        return self._call(self._session.next_event(timeout))

    def events(self) -> Iterator[Event]:
        iterator = self._session.events().__aiter__()
        while True:
            try:
                yield self._call(iterator.__anext__())
            except StopAsyncIteration:
                return

    def end(self, timeout: float = 10.0) -> str:
        try:
            return self._call(self._session.end(timeout))
        finally:
            self._stop_loop()

    def close(self) -> None:
        if self._loop.is_running():
            try:
                self._call(self._session.close())
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _open(connect_kwargs: dict[str, Any]) -> Session:
    return await connect_async(**connect_kwargs)


def connect(url: str, **kwargs: Any) -> SyncSession:
    """`voxgate.client.connect`, blocking: the same arguments, a SyncSession."""
    return SyncSession(url=url, **kwargs)
