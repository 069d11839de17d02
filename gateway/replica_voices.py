"""Voices from clients, recorded so that they outlive engine restarts: every replica holds every
voice, and a rebuilt one is given them all again before it serves.

With engine replicas (`--replicas`) a session is placed on whichever replica has the most
headroom (gateway/placement.py), so a voice a client added must be usable on all of them. The
pool gives each voice to every replica that serves when it is added, and keeps the checked clip
here: a replica rebuilt after a death (gateway/supervisor.py) is given every recorded voice
again before it serves (`restore`, its supervisor's `before_serving`), so a voice added once
outlives replica restarts. Removing a voice removes it everywhere and from the record.

With one engine (the default) its supervisor keeps the record, as a pool of one: the engine
it rebuilds after a crash gets the voices back the same way.

The record holds each voice's clip as the engine got it (float32 samples at the clip's own
rate: 4 bytes a sample), bounded as the voices are (gateway/voice_lru.py). No torch, no Ray.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from engine.api import EngineDead, ModelInputError, VoiceClip

log = logging.getLogger("voxgate.voices")


class ReplicaVoices:
    def __init__(self, replicas: Sequence[Any]) -> None:
        """`replicas`: the engines that hold the voices (a pool's supervised replicas, or the
        one engine a supervisor serves from), each with `ready` and the voice calls."""
        self._replicas = replicas
        self._clips: dict[str, VoiceClip] = {}  # every voice the replicas hold, by name

    def __contains__(self, name: object) -> bool:
        return name in self._clips

    def __len__(self) -> int:
        return len(self._clips)

    async def add(self, name: str, clip: VoiceClip) -> int:
        """Give the voice to every serving replica; the bytes one holds. Raises what a replica
        raised when the voice cannot be served everywhere (ModelInputError: the model refused
        the clip, which every replica would; EngineDead: none serves), having taken it back
        from the others."""
        self._clips[name] = clip  # first, so that a replica rebuilt meanwhile gets it too
        serving = [r for r in self._replicas if r.ready]
        if not serving:
            del self._clips[name]
            raise EngineDead("no engine is running: it is being restarted")
        try:
            results = await asyncio.gather(
                *(r.add_clip_voice(name, clip) for r in serving), return_exceptions=True
            )
        except asyncio.CancelledError:  # the caller left: no replica keeps a voice nobody lists
            self.remove(name)
            raise
        sizes = [n for n in results if isinstance(n, int)]
        refusal = next((e for e in results if isinstance(e, ModelInputError)), None)
        # A replica that failed and serves still would lack the voice; one that died meanwhile
        # is given it when rebuilt (restore).
        lacking = [
            e
            for r, e in zip(serving, results, strict=True)
            if isinstance(e, BaseException) and r.ready
        ]
        failure = refusal or (lacking[0] if lacking else None)
        if failure is None and not sizes:
            failure = EngineDead("the engine stopped while the voice was added")
        if failure is not None:
            self.remove(name)
            raise failure
        return max(sizes)

    def remove(self, name: str) -> None:
        """Forget the voice on every replica (one being rebuilt: restore leaves it out)."""
        self._clips.pop(name, None)
        for replica in self._replicas:
            replica.remove_clip_voice(name)

    async def restore(self, engine: Any) -> None:
        """Give a rebuilt replica's new engine every recorded voice, before it serves: those
        added while this runs too, and none removed meanwhile. Raises EngineDead (or the
        engine's error) when the new engine stops: its supervisor counts a failed restart."""
        given: set[str] = set()
        while missing := [n for n in self._clips if n not in given]:
            for name in missing:
                clip = self._clips.get(name)
                if clip is None:
                    continue  # removed while an earlier one was encoded
                given.add(name)
                try:
                    await engine.add_clip_voice(name, clip)
                except ModelInputError as exc:  # it took the clip before: say so, serve on
                    log.error("a rebuilt engine could not take voice %s again: %s", name, exc)
        for name in given - self._clips.keys():
            engine.remove_clip_voice(name)
        if given:
            log.info("a rebuilt engine was given the clients' voices again (%d)", len(self._clips))
