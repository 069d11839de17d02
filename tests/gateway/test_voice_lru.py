"""The per-key bounded LRU of voices added from clips (gateway/voice_lru.py): one key never
sees another's voices, and each bound (count and bytes per key, count in all) evicts the
least recently used voice, of that key first."""

from __future__ import annotations

import pytest

from gateway.voice_lru import ClientVoice, VoiceLimits, VoiceLRU


def voice(voice_id: str, key: str = "key-0", nbytes: int = 100) -> ClientVoice:
    return ClientVoice(voice_id, key, voice_id, 3.0, nbytes)


def test_keys_see_only_their_own_voices():
    lru = VoiceLRU(VoiceLimits(per_key=4, bytes_per_key=10_000, total=100))
    lru.add(voice("a", "key-0"))
    lru.add(voice("b", "key-1"))
    assert [v.voice_id for v in lru.owned("key-0")] == ["a"]
    assert lru.get("key-1", "a") is None and lru.get("key-0", "a") is not None
    assert not lru.touch("key-1", "a")
    assert lru.remove("key-1", "a") is None  # another key cannot delete it
    assert lru.remove("key-0", "a") is not None and lru.owned("key-0") == []


def test_count_per_key_evicts_that_keys_least_recently_used():
    lru = VoiceLRU(VoiceLimits(per_key=2, bytes_per_key=10_000, total=100))
    assert lru.add(voice("a")) == [] and lru.add(voice("b")) == []
    lru.add(voice("other", "key-1"))
    assert lru.touch("key-0", "a")  # a is used: b is now the least recent
    assert [v.voice_id for v in lru.add(voice("c"))] == ["b"]
    assert [v.voice_id for v in lru.owned("key-0")] == ["a", "c"]  # in the order added
    assert [v.voice_id for v in lru.owned("key-1")] == ["other"]


def test_bytes_per_key_evict_until_the_new_voice_fits():
    lru = VoiceLRU(VoiceLimits(per_key=10, bytes_per_key=1000, total=100))
    for name in "abc":
        lru.add(voice(name, nbytes=300))
    evicted = lru.add(voice("d", nbytes=500))
    assert [v.voice_id for v in evicted] == ["a", "b"]
    assert sum(v.nbytes for v in lru.owned("key-0")) == 800
    assert not lru.fits(1001) and lru.fits(1000)
    with pytest.raises(ValueError):
        lru.add(voice("huge", nbytes=1001))


def test_the_total_evicts_anyones_least_recently_used():
    lru = VoiceLRU(VoiceLimits(per_key=10, bytes_per_key=10_000, total=2))
    lru.add(voice("a", "key-0"))
    lru.add(voice("b", "key-1"))
    assert [v.voice_id for v in lru.add(voice("c", "key-2"))] == ["a"]
    assert len(lru) == 2


def test_zero_per_key_keeps_nothing():
    assert not VoiceLRU(VoiceLimits(per_key=0, bytes_per_key=10_000, total=10)).fits(1)


def test_clear_returns_every_voice():
    lru = VoiceLRU(VoiceLimits(per_key=10, bytes_per_key=10_000, total=10))
    lru.add(voice("a", "key-0"))
    lru.add(voice("b", "key-1"))
    assert {v.voice_id for v in lru.clear()} == {"a", "b"} and len(lru) == 0
    assert lru.owned("key-0") == []
