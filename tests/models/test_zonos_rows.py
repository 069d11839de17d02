"""Zonos' per-request options (published defaults, clear errors) and the delay-pattern rules
each sampled row goes through (rows.py), checked against the official code's rules as the
docstrings state them: masks before a codebook starts, the EOS cascade after codebook 0's EOS,
and audio frames read back out of the delayed grid."""

from __future__ import annotations

import pytest

from models.base import ModelInputError
from models.codecs.dac import DacStream
from models.zonos import rows as R
from models.zonos.model import ZonosStream, audio_frames
from models.zonos.options import DEFAULT_EMOTION, ZonosConditioning
from models.zonos.phonemes import LANGUAGES, phoneme_ids


def test_defaults_are_the_published_ones():
    o = ZonosConditioning()
    assert (o.fmax, o.pitch_std, o.speaking_rate, o.language) == (22050.0, 20.0, 15.0, "en-us")
    assert o.emotion == DEFAULT_EMOTION
    assert sum(o.normalised_emotion) == pytest.approx(1.0)
    assert o.language_id == LANGUAGES.index("en-us") == 24
    assert len(LANGUAGES) == 109  # within the language conditioner's ids (-1..126)


@pytest.mark.parametrize(
    "given, message",
    [
        ({"pitch_std": 500}, "pitch_std must be between 0 and 400"),
        ({"fmax": -1}, "fmax must be between 0 and 24000"),
        ({"speaking_rate": float("nan")}, "speaking_rate must be between 0 and 40"),
        ({"emotion": [0.5] * 7}, "emotion must be 8 weights"),
        ({"emotion": [0.0] * 8}, "must not all be 0"),
        ({"emotion": {"joy": 1.0}}, "unknown emotion joy"),
        ({"language": "xx"}, "not one Zonos knows"),
        ({"language": "ja"}, "Sudachi"),
        ({"cfg": 3}, "Zonos takes no option cfg"),
    ],
)
def test_bad_options_get_clear_errors(given, message):
    with pytest.raises(ModelInputError, match=message):
        ZonosConditioning.from_request(given)


def test_emotion_by_name():
    o = ZonosConditioning.from_request({"emotion": {"anger": 1.0, "neutral": 1.0}})
    assert o.normalised_emotion == (0, 0, 0, 0, 0, 0.5, 0, 0.5)


def test_phoneme_ids_frame_the_symbols():
    # Punctuation first, then letters, then IPA, after the 4 special ids.
    # (The whole table is compared with the official one in test_zonos_parity.py.)
    assert phoneme_ids(";a,") == [2, 4, 4 + 24 + 26, 4 + 2, 3]
    ids = phoneme_ids("hə")
    assert ids[0] == 2 and ids[-1] == 3 and len(ids) == 4
    assert phoneme_ids("\u4e00")[1] == 1  # an unknown symbol


def _generate(draws: list[list[int]]) -> list[tuple[int, ...]]:
    output: list[tuple[int, ...]] = []
    for drawn in draws:
        output.append(R.follow(output, drawn))
    return output


def test_rows_carry_the_delay_masks_and_the_previous_frame():
    rows = _generate([[10 + i] * 9 for i in range(10)])
    for t, row in enumerate(rows, start=1):  # grid frame t: codebooks >= t still masked
        assert row[:9] == tuple(10 + t - 1 if k < t else R.MASK_CODE for k in range(9))
        previous = rows[t - 2][:9] if t > 1 else (R.MASK_CODE,) * 9
        assert row[R.PREVIOUS] == previous
    assert not any(R.is_last(r) for r in rows)


def test_eos_cascades_through_the_codebooks_then_ends():
    draws = [[20 + i] * 9 for i in range(12)]
    draws += [[R.EOS_CODE] + [7] * 8] + [[5] * 9] * 8
    rows = _generate(draws)
    s = 12  # output index of codebook 0's EOS
    for i in range(9):
        row = rows[s + i][:9]
        assert row[:i] == (R.MASK_CODE,) * i and row[i] == R.EOS_CODE
    assert R.is_last(rows[s + 8]) and not any(R.is_last(r) for r in rows[: s + 8])
    # Audio: frames before the EOS frame, codebook k of audio frame j from grid frame j + k + 1.
    state = ZonosStream(dac=DacStream())
    state.grid = [list(r[:9]) for r in rows]
    frames = audio_frames(state)
    assert len(frames) == s and state.ended
    assert frames[0] == [20 + k for k in range(9)]


def test_request_options_are_declared_for_the_generic_path():
    """Numbers with the metadata `request_option` gives (minimum, maximum, help), defaults in
    range, and the language as a text option whose choices are Zonos' languages less the one
    it cannot phonemize (ja); a request's flat values become the model's typed options."""
    import dataclasses

    from models.request_options import RequestOptionError, option_specs, resolve_request_options
    from models.zonos.family import REQUEST_OPTIONS

    *numbers, language = dataclasses.fields(REQUEST_OPTIONS)
    for spec in numbers:
        meta = spec.metadata
        assert set(meta) == {"minimum", "maximum", "help"}
        assert meta["minimum"] <= spec.default <= meta["maximum"]
    assert language.name == "language" and language.default == "en-us"
    specs = option_specs(REQUEST_OPTIONS)
    assert specs[-1].choices == tuple(c for c in LANGUAGES if c != "ja")
    values = {f.name: f.default for f in dataclasses.fields(REQUEST_OPTIONS)}
    assert resolve_request_options(specs, {}, "tiny-zonos") == values
    assert ZonosConditioning.from_request(values) == ZonosConditioning()
    angry = ZonosConditioning.from_request({**values, "emotion_anger": 1.0, "pitch_std": 90.0})
    assert angry.emotion[5] == 1.0 and angry.pitch_std == 90.0
    german = resolve_request_options(specs, {"language": "DE"}, "tiny-zonos")
    assert ZonosConditioning.from_request(german).language_id == LANGUAGES.index("de")
    # Japanese is refused before the model, with the reason the model gives too.
    with pytest.raises(RequestOptionError, match="Sudachi") as info:
        resolve_request_options(specs, {"language": "ja"}, "tiny-zonos")
    assert info.value.option == "language" and "en-us" in str(info.value)
    with pytest.raises(ModelInputError, match="Sudachi"):
        ZonosConditioning.from_request({"language": "ja"})
    with pytest.raises(ModelInputError, match="emotion_\\* weights"):
        ZonosConditioning.from_request({"emotion_fear": 1.0, "emotion": [1.0] * 8})


def test_voices_from_speaker_embedding_files(tmp_path):
    """`.npy` voices need no speaker model (clips: tests/models/test_zonos_speaker.py)."""
    import numpy as np

    from models.checkpoint_errors import CheckpointError
    from models.zonos.voices import read_voices

    def no_clips(audio):
        raise AssertionError("no clip in this folder")

    with pytest.raises(CheckpointError, match="holds no clips"):
        read_voices(tmp_path, 128, no_clips, 16000)
    np.save(tmp_path / "anna.npy", np.arange(128, dtype=np.float32)[None])  # as (1, 128)
    assert read_voices(tmp_path, 128, no_clips, 16000)["anna"][:3] == [0.0, 1.0, 2.0]
    np.save(tmp_path / "short.npy", np.zeros(64, dtype=np.float32))
    with pytest.raises(CheckpointError, match="holds 64 values; a Zonos speaker embedding is 128"):
        read_voices(tmp_path, 128, no_clips, 16000)
    with pytest.raises(CheckpointError, match="does not exist"):
        read_voices(tmp_path / "nowhere", 128, no_clips, 16000)


def test_real_layout_shapes_of_the_transformer_and_the_hybrid():
    """zonos-v0.1's and zonos-v0.1-hybrid's published tensor shapes (built on the meta device:
    no memory), and a hybrid config Voxgate cannot run refused with the reason."""
    import torch

    from models.checkpoint_errors import CheckpointError
    from models.zonos.checkpoint import ZonosWeights
    from models.zonos.config import REAL, REAL_HYBRID, ZonosConfig

    with torch.device("meta"):
        weights = ZonosWeights(REAL)
    shapes = {k: tuple(v.shape) for k, v in weights.state_dict().items()}
    assert shapes["backbone.layers.25.mixer.in_proj.weight"] == ((16 + 2 * 4) * 128, 2048)
    assert shapes["backbone.layers.0.mlp.fc1.weight"] == (2 * 8192, 2048)
    assert shapes["embeddings.8.weight"] == (1026, 2048)
    assert shapes["heads.0.weight"] == (1025, 2048)
    assert shapes["prefix_conditioner.conditioners.1.project.weight"] == (2048, 128)
    assert shapes["prefix_conditioner.conditioners.2.weight"] == (1024, 8)
    assert shapes["prefix_conditioner.conditioners.6.int_embedder.weight"] == (128, 2048)
    assert 1.5e9 < sum(v.numel() for v in weights.state_dict().values()) < 1.7e9
    with torch.device("meta"):
        hybrid = ZonosWeights(REAL_HYBRID)
    shapes = {k: tuple(v.shape) for k, v in hybrid.state_dict().items()}
    # Mamba2 (mamba-ssm defaults at d_model 2048): z, xBC, dt = 4096 + 4352 + 64 outputs
    assert shapes["backbone.layers.1.mixer.in_proj.weight"] == (8512, 2048)
    assert shapes["backbone.layers.1.mixer.conv1d.weight"] == (4352, 1, 4)
    assert shapes["backbone.layers.45.mixer.A_log"] == (64,)
    assert shapes["backbone.layers.1.mixer.norm.weight"] == (4096,)
    assert shapes["backbone.layers.1.mixer.out_proj.weight"] == (2048, 4096)
    assert "backbone.layers.1.mlp.fc1.weight" not in shapes  # no MLP after a Mamba2 layer
    assert shapes["backbone.layers.44.mixer.in_proj.weight"] == ((16 + 2 * 4) * 128, 2048)
    assert shapes["backbone.layers.44.mlp.fc1.weight"] == (2 * 8192, 2048)
    assert shapes["prefix_conditioner.conditioners.10.int_embedder.weight"] == (2, 2048)
    assert 1.6e9 < sum(v.numel() for v in hybrid.state_dict().values()) < 1.7e9
    assert ZonosConfig.from_dict(REAL_HYBRID.to_dict()) == REAL_HYBRID
    with_mlp = REAL_HYBRID.to_dict()
    with_mlp["backbone"]["d_intermediate"] = 1024
    with pytest.raises(CheckpointError, match="d_intermediate must be 0"):
        ZonosConfig.from_dict(with_mlp)
