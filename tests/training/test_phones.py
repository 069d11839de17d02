"""The teacher's phones with durations: Flite (local `.teacher` debs, or a system flite) writes the
audio and its phones in one call, the teacher shards keep them, and codec encoding turns them into
a per-frame phone index (phones-NN.npz) that agrees with Flite's times."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from models.codecs.voxcodec import VoxCodec
from models.codecs.voxcodec_stream import save_voxcodec
from training.common import TeacherCorpus
from training.phones import PHONE_INVENTORY, frame_phone_index, parse_psdur, phone_ids

REPO = Path(__file__).resolve().parents[2]


def teacher_args() -> list[str]:
    if any((REPO / ".teacher").glob("flite_*.deb")):
        return ["--debs", str(REPO / ".teacher")]
    if shutil.which("flite"):
        return []
    pytest.skip("no teacher: apt-get install flite, or `make teacher-debs`")


def test_parse_psdur_continues_the_clock_across_flite_utterances():
    names, ends = parse_psdur("pau:0.16 hh:0.25 aw:0.37 pau:0.50 \npau:0.10 s:0.30 pau:0.40\n")
    assert names == ["pau", "hh", "aw", "pau", "pau", "s", "pau"]
    np.testing.assert_allclose(ends, [0.16, 0.25, 0.37, 0.50, 0.60, 0.80, 0.90])
    with pytest.raises(ValueError, match="PHONE:SECONDS"):
        parse_psdur("pau 0.1")
    with pytest.raises(ValueError, match="PHONE_INVENTORY"):
        phone_ids(["pau", "xx"])


def test_frame_phone_index_takes_the_phone_at_each_frame_centre():
    # 50 Hz frames: centres at 10, 30, 50, ... ms. A phone trimmed away ends before 0.
    ends = np.array([-0.05, 0.04, 0.045, 0.10, 0.50])
    index = frame_phone_index(ends, 8, 50.0)
    # the 5 ms phone (index 2) gets no frame; frames past the last end keep the last phone
    assert index.tolist() == [1, 1, 3, 3, 3, 4, 4, 4]
    assert index.dtype == np.int16


def toy_codec(folder):
    from training.codec import CONFIGS

    torch.manual_seed(0)
    save_voxcodec(VoxCodec(CONFIGS["toy"]).eval(), folder, torch.float32)


def test_teacher_records_phones_and_encode_writes_a_frame_index(tmp_path):
    from training import codec, teacher

    args = teacher_args()
    teacher.main([*args, "--out", str(tmp_path / "teacher"), "--hours", "0.002", "--workers", "1"])
    shard = np.load(tmp_path / "teacher/shard-00.npz")
    phones = json.loads(str(shard["phones"]))
    assert len(phones) == len(shard["lengths"]) >= 2
    assert shard["phone_counts"].tolist() == [len(p) for p in phones]
    assert all(p[0] == "pau" and p[-1] == "pau" for p in phones)

    corpus = TeacherCorpus.load(tmp_path / "teacher")
    for u, ends in enumerate(corpus.phone_ends):
        assert np.all(np.diff(ends) >= 0)
        # Flite's last phone ends where its untrimmed audio ends; the trim only cut silence
        untrimmed_end = ends[-1] + shard["trim_starts"][u] / corpus.rate
        assert untrimmed_end * corpus.rate >= shard["trim_starts"][u] + corpus.lengths[u] - 80
        # trim_silence keeps 50 ms before the first loud window: the leading pause ends there
        # (Flite's untrimmed pause lasts ~160 ms, so an unshifted time would fail this)
        assert abs(ends[0] - 0.05) <= 0.06

    toy_codec(tmp_path / "codec")
    cmd = ["encode", "--teacher", str(tmp_path / "teacher"), "--codec", str(tmp_path / "codec")]
    codec.main([*cmd, "--out", str(tmp_path / "tokens"), "--device", "cpu"])
    tokens = np.load(tmp_path / "tokens/tokens-00.npz")
    aligned = np.load(tmp_path / "tokens/phones-00.npz")
    assert json.loads(str(aligned["inventory"])) == list(PHONE_INVENTORY)
    assert aligned["lengths"].tolist() == tokens["lengths"].tolist()
    assert aligned["phone_index"].dtype == np.int16
    assert len(aligned["phone_index"]) == len(tokens["codes"])  # every frame has a phone
    texts = json.loads(str(tokens["texts"]))
    for u, (off, n) in enumerate(zip(tokens["offsets"], tokens["lengths"], strict=True)):
        source = corpus.texts.index(texts[u])
        ends = corpus.phone_ends[source]
        index = aligned["phone_index"][off : off + n].astype(np.int64)
        count = aligned["phone_counts"][u]
        ids = aligned["phones"][aligned["phone_offsets"][u] :][:count]
        assert ids.tolist() == phone_ids(corpus.phones[source]).tolist()
        assert np.all(np.diff(index) >= 0) and index.min() >= 0 and index.max() < count
        # where the index moves on to phone b, Flite ended phone b-1 within one frame (20 ms)
        for f in np.flatnonzero(np.diff(index)) + 1:
            assert abs(f / 50.0 - ends[index[f] - 1]) <= 1 / 50.0
        # every phone Flite gave two frames or more inside the audio has frames of its own
        starts = np.concatenate([[-np.inf], ends[:-1]])
        long = np.flatnonzero((ends - np.maximum(starts, 0) >= 0.04) & (ends <= n / 50.0))
        assert set(long.tolist()) <= set(index.tolist())


def test_old_teacher_corpora_without_phones_still_load_and_encode(tmp_path):
    from training import codec

    teacher = tmp_path / "teacher"
    teacher.mkdir()
    rng = np.random.default_rng(0)
    np.savez(  # the layout before phones: audio, offsets, lengths, texts
        teacher / "shard-00.npz",
        audio=(rng.standard_normal(16000) * 3000).astype(np.int16),
        offsets=np.array([0, 6000], np.int64),
        lengths=np.array([6000, 10000], np.int64),
        texts=np.array(json.dumps(["one", "two"])),
    )
    corpus = TeacherCorpus.load(teacher)
    assert corpus.phones is None and corpus.phone_ends is None and corpus.texts == ["one", "two"]
    toy_codec(tmp_path / "codec")
    cmd = ["encode", "--teacher", str(teacher), "--codec", str(tmp_path / "codec")]
    codec.main([*cmd, "--out", str(tmp_path / "tokens"), "--device", "cpu"])
    assert (tmp_path / "tokens/tokens-00.npz").exists()
    assert not list((tmp_path / "tokens").glob("phones-*.npz"))
