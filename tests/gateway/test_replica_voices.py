"""Clients' voices across engine replicas (gateway/replica_voices.py) and the supervisor's
`before_serving` (gateway/supervisor.py), without Ray: replicas here are in-memory engines that
hold voices by name as a model does (the live pool with real replicas is
tests/scaleout/test_voices_across_replicas.py). What is checked is the record's bookkeeping under the
interleavings a live pool rarely shows on cue: a refusal taken back everywhere, a replica that
died meanwhile left to its rebuild, voices added or removed while a rebuilt replica is
restored."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.api import EngineDead, EngineStats, ModelInputError, StepTiming, VoiceClip
from gateway.replica_voices import ReplicaVoices
from gateway.supervisor import RestartPolicy, SupervisedEngine

CLIP = VoiceClip(np.zeros(32000, np.float32), 16000)


class MemoryEngine:
    """An engine's voice surface (voices by name, encoded after `delay_s`) and what the
    supervisor reads of an engine."""

    def __init__(self, refuse: bool = False, delay_s: float = 0.0) -> None:
        self.voices: dict[str, VoiceClip] = {}
        self.ready = True
        self.refuse = refuse
        self.delay_s = delay_s
        self.facts = None

    async def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        await asyncio.sleep(self.delay_s)
        if not self.ready:
            raise EngineDead("the engine is not running")
        if self.refuse:
            raise ModelInputError("the clip is unusable")
        self.voices[name] = clip
        return 4 * len(clip.audio)

    def remove_clip_voice(self, name: str) -> None:
        self.voices.pop(name, None)

    def stats(self) -> EngineStats:
        return EngineStats(0, 0, 0, 0, 0, StepTiming(), self.ready)

    async def shutdown(self) -> None:
        self.ready = False


async def test_a_voice_goes_to_every_serving_replica_and_is_removed_from_all():
    replicas = [MemoryEngine(), MemoryEngine(), MemoryEngine()]
    replicas[2].ready = False  # being rebuilt: restore gives it the voice
    voices = ReplicaVoices(replicas)
    assert await voices.add("clip-a", CLIP) == 4 * 32000
    assert [list(r.voices) for r in replicas] == [["clip-a"], ["clip-a"], []]
    assert "clip-a" in voices
    voices.remove("clip-a")
    assert [r.voices for r in replicas] == [{}, {}, {}] and len(voices) == 0


async def test_a_refused_clip_is_taken_back_from_the_replicas_that_took_it():
    replicas = [MemoryEngine(), MemoryEngine(refuse=True)]
    voices = ReplicaVoices(replicas)
    with pytest.raises(ModelInputError, match="unusable"):
        await voices.add("clip-a", CLIP)
    assert replicas[0].voices == {} and "clip-a" not in voices


async def test_a_replica_dying_meanwhile_is_left_to_its_rebuild_and_none_serving_refuses():
    replicas = [MemoryEngine(), MemoryEngine(delay_s=0.05)]
    voices = ReplicaVoices(replicas)
    adding = asyncio.create_task(voices.add("clip-a", CLIP))
    await asyncio.sleep(0.01)
    replicas[1].ready = False  # dies while encoding
    assert await adding == 4 * 32000
    assert "clip-a" in voices and "clip-a" in replicas[0].voices
    for replica in replicas:
        replica.ready = False
    with pytest.raises(EngineDead):
        await voices.add("clip-b", CLIP)
    assert "clip-b" not in voices


async def test_restore_gives_every_voice_including_those_added_or_removed_meanwhile():
    live = MemoryEngine()
    voices = ReplicaVoices([live])
    for name in ("clip-a", "clip-b"):
        await voices.add(name, CLIP)
    rebuilt = MemoryEngine(delay_s=0.02)
    restoring = asyncio.create_task(voices.restore(rebuilt))
    await asyncio.sleep(0.01)
    await voices.add("clip-c", CLIP)  # the rebuilt one is not in the pool's list yet
    voices.remove("clip-a")
    await restoring
    assert sorted(rebuilt.voices) == ["clip-b", "clip-c"] == sorted(live.voices)


async def test_a_rebuilt_engine_serves_only_after_before_serving_and_its_failure_is_a_failed_restart():
    policy = RestartPolicy(backoff_s=0.01, max_backoff_s=0.02, max_failures=5, poll_s=0.01)
    built: list[MemoryEngine] = []
    prepared: list[MemoryEngine] = []

    def factory():
        built.append(MemoryEngine())
        return built[-1]

    supervised = SupervisedEngine(factory, factory(), policy)

    async def before_serving(engine):
        assert supervised.engine is not engine and not supervised.ready  # not serving yet
        prepared.append(engine)
        if len(prepared) == 1:
            raise EngineDead("the new engine stopped")

    supervised.before_serving = before_serving
    supervised.watch()
    try:
        built[0].ready = False
        for _ in range(500):
            if supervised.ready:
                break
            await asyncio.sleep(0.01)
        assert supervised.ready and supervised.engine is built[2] is prepared[1]
        assert not built[1].ready  # the one whose preparation failed was shut down
        assert supervised.record.restarts == 1
    finally:
        await supervised.stop_watching()


async def test_one_supervised_engine_gives_its_rebuilt_engine_the_voices_it_was_given():
    """Without replicas the supervisor records the voices itself (a pool of one): the engine
    it builds in place of a dead one gets every voice added and not removed before it serves,
    and a voice added while it is being rebuilt is refused (EngineDead) and not recorded."""
    policy = RestartPolicy(backoff_s=0.05, max_backoff_s=0.1, max_failures=5, poll_s=0.01)
    built: list[MemoryEngine] = []

    def factory():
        built.append(MemoryEngine())
        return built[-1]

    supervised = SupervisedEngine(factory, factory(), policy)
    supervised.watch()
    try:
        for name in ("clip-a", "clip-b", "clip-c"):
            assert await supervised.add_clip_voice(name, CLIP) == 4 * 32000
        supervised.remove_clip_voice("clip-b")
        assert sorted(built[0].voices) == ["clip-a", "clip-c"]
        built[0].ready = False
        await asyncio.sleep(0.03)  # the watcher has seen the death, the backoff runs
        assert not supervised.ready
        with pytest.raises(EngineDead, match="being restarted"):
            await supervised.add_clip_voice("clip-d", CLIP)
        for _ in range(500):
            if supervised.ready:
                break
            await asyncio.sleep(0.01)
        assert supervised.ready and supervised.engine is built[1]
        assert sorted(built[1].voices) == ["clip-a", "clip-c"]
    finally:
        await supervised.stop_watching()


async def test_replicas_in_a_pool_leave_the_voices_to_the_pools_record():
    """A replica of a pool forwards voices to its engine and keeps no record of its own (the
    pool's record restores every replica), so a voice is encoded once per replica."""
    engine = MemoryEngine()
    replica = SupervisedEngine(lambda: MemoryEngine(), engine)
    voices = ReplicaVoices([replica])
    replica.keep_voices_in(voices.restore)
    await voices.add("clip-a", CLIP)
    assert list(engine.voices) == ["clip-a"] and replica.before_serving == voices.restore
    rebuilt = MemoryEngine()
    await replica.before_serving(rebuilt)
    assert list(rebuilt.voices) == ["clip-a"]


async def test_voices_go_to_the_gateways_engine_and_are_off_with_several_gateway_processes():
    """A session's engine is one replica of the pool: its voice goes to the gateway's engine
    (`home`), which gives it to every replica. With several gateway processes each would keep
    a list of its own, and a client's next connection may reach another, so there adding one
    answers voices_disabled."""
    from clip_files import VOICE_CLIP, b64

    from engine.api import ModelFacts
    from gateway.app import Gateway
    from gateway.clip_audio import ClipError
    from gateway.config import GatewaySettings
    from gateway.protocol import ClipUpload
    from models.voice_clip import ClipRules

    facts = ModelFacts(
        "m", 24000, 25.0, (), 25, 25, voice_cloning=True, clip_rules=ClipRules(2, 30, False)
    )
    home, session_engine = MemoryEngine(), MemoryEngine()
    home.facts = session_engine.facts = facts
    upload = ClipUpload(b64(VOICE_CLIP))
    one = Gateway(GatewaySettings(replicas=2), home)
    voice = await one.client_voices.add(session_engine, "key", upload)
    assert list(home.voices) == [voice.voice_id] and session_engine.voices == {}
    assert [v.voice_id for v in one.client_voices.owned(session_engine, "key")] == [voice.voice_id]
    many = Gateway(GatewaySettings(replicas=2, gateway_processes=2), home)
    with pytest.raises(ClipError) as refused:
        await many.client_voices.add(session_engine, "key", upload)
    assert refused.value.code == "voices_disabled" and refused.value.status == 403
