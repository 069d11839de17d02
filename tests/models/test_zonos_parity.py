"""Zonos v0.1 through the engine (four stages, paged KV with both CFG rows, batched requests)
against the official Zonos code (tests/models/official_zonos.py), float32 on the CPU, the same
seeded random weights (the tiny-zonos preset) in both: greedy delayed code grids equal, the
EOS cascade equal, the prefix conditioning equal with non-default options, and the streamed
DAC audio equal to the official decode of its codes (transformers' DacModel) to float
rounding."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.zonos import rows as R
from models.zonos.loading import load_zonos
from models.zonos.options import EMOTIONS, ZonosConditioning
from models.zonos.phonemes import espeak_available
from models.zonos.presets import ensure_tiny_zonos
from tests.models.engine_run import run
from tests.models.official_zonos import official_greedy_grid, official_model
from tests.models.test_dac_stream import ROUNDING
from tests.torch_threads import one_torch_thread

pytestmark = pytest.mark.skipif(
    not espeak_available(),
    reason="Zonos' phonemes need eSpeak NG and phonemizer: run `make zonos-deps`",
)
TEXTS = ["Hello, world!", "A second sentence, said slowly."]
FRAMES = 20


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices: on a shared 2-core box a second thread only adds contention.
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_zonos(tmp_path_factory.mktemp("zonos")) / "model"


def _engine_run(folder, texts, frames):
    model = load_zonos(str(folder), torch.device("cpu"), torch.float32)
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=frames)
    requests, audio, _, peak = run(core, [SpeechRequest(t, None, params) for t in texts])
    assert core.blocks.num_used == 0
    grids = [torch.tensor([row[: R.N_CODEBOOKS] for row in r.output_ids]).T for r in requests]
    pcm = [np.concatenate(audio.get(r.request_id, [np.zeros(0, np.float32)])) for r in requests]
    return model, grids, pcm, peak


def _official_audio(reference, codes: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return reference.autoencoder.decode(codes[None])[0, 0].numpy()


def test_batched_greedy_grids_and_audio_equal_the_official(folder):
    reference = official_model(folder, folder / "dac")
    _, grids, pcm, peak = _engine_run(folder, TEXTS, FRAMES)
    assert peak == 2
    for text, grid, audio in zip(TEXTS, grids, pcm, strict=True):
        want, codes = official_greedy_grid(reference, text, FRAMES)
        assert torch.equal(grid, want), text
        expected = _official_audio(reference, codes[:, : FRAMES - R.N_CODEBOOKS + 1])
        assert audio.shape == expected.shape
        # Streamed in windows (models/codecs/dac.py): their seams differ from one whole
        # decode by float rounding, as test_dac_stream.py measures it.
        np.testing.assert_allclose(audio, expected, atol=ROUNDING * np.abs(expected).max())


def test_eos_cascade_and_end_equal_the_official(folder, tmp_path):
    """A head where EOS outscores one code wherever that code would win: codebook 0 ends the
    utterance mid-way, and the 8 frames after it carry the published EOS cascade."""
    reference = official_model(folder, folder / "dac")
    first, _ = official_greedy_grid(reference, TEXTS[0], 12)
    code = int(first[0, 6])
    ending = tmp_path / "ending"
    shutil.copytree(folder, ending)
    state = load_file(str(ending / "model.safetensors"))
    state["heads.0.weight"][R.EOS_CODE] = state["heads.0.weight"][code] * 1.5
    save_file(state, str(ending / "model.safetensors"))
    reference = official_model(ending, ending / "dac")
    want, codes = official_greedy_grid(reference, TEXTS[0], 40)
    model, grids, pcm, _ = _engine_run(ending, TEXTS[:1], 40)
    grid = grids[0]
    assert model.is_stop(tuple(grid[:, -1].tolist()))  # ended by EOS, not by max_tokens
    end = int((grid[0] == R.EOS_CODE).nonzero()[0])
    assert grid.shape[1] == end + R.N_CODEBOOKS
    assert torch.equal(grid, want[:, : grid.shape[1]])
    assert codes.shape[1] == end  # the official output: the audio frames before EOS
    np.testing.assert_allclose(pcm[0], _official_audio(reference, codes), atol=1e-5)


def test_prefix_with_options_equals_the_official(folder):
    """The conditioning prefix (both CFG rows) for a speaker embedding and non-default
    per-request options."""
    from tests.models.official_zonos import import_official

    _, conditioning, _ = import_official()
    reference = official_model(folder, folder / "dac")
    model = load_zonos(str(folder), torch.device("cpu"), torch.float32)
    options = ZonosConditioning(
        emotion=(0.9, 0.0, 0.1, 0.0, 0.0, 0.2, 0.1, 0.1),
        fmax=24000.0,
        pitch_std=120.0,
        speaking_rate=25.0,
        language="de",
    )
    text = "Guten Morgen, wie geht es?"
    speaker = torch.randn(128, generator=torch.Generator().manual_seed(5))
    model.add_voices({"anna": speaker.tolist()})
    rows = model.preprocess_with(text, "anna", options).token_ids[:-1]  # less frame 0
    # The same through the generic path's flat values: the numbers, and the language (text),
    # left at its default (en-us) or set.
    flat = dict(zip([f"emotion_{n}" for n in EMOTIONS], options.emotion, strict=True))
    flat.update(fmax=options.fmax, pitch_std=options.pitch_std, speaking_rate=25.0)
    english = replace(options, language="en-us")
    through_flat = model.preprocess_with_options(text, "anna", flat).token_ids
    assert through_flat == model.preprocess_with(text, "anna", english).token_ids
    german = model.preprocess_with_options(text, "anna", {**flat, "language": "de"}).token_ids
    assert german[:-1] == rows and german != through_flat
    with torch.inference_mode():
        mine = model.embed(torch.tensor(rows))  # [P, 2, D]
        cond = conditioning.make_cond_dict(
            text=text,
            language="de",
            speaker=speaker[None],
            emotion=list(options.emotion),
            fmax=options.fmax,
            pitch_std=options.pitch_std,
            speaking_rate=options.speaking_rate,
            device="cpu",
        )
        want = reference.prepare_conditioning(cond)  # [2, P, D]
    torch.testing.assert_close(mine.transpose(0, 1), want, rtol=1e-5, atol=1e-5)


def test_symbol_table_and_languages_equal_the_official():
    from models.zonos import phonemes
    from tests.models.official_zonos import import_official

    _, conditioning, _ = import_official()
    assert tuple(conditioning.supported_language_codes) == phonemes.LANGUAGES
    assert len(conditioning.SPECIAL_TOKEN_IDS) + len(conditioning.symbols) == phonemes.VOCAB_SIZE
    for symbol, index in conditioning._symbol_to_id.items():
        assert phonemes.phoneme_ids(symbol)[1] == index
    text = "Hello, world! It's a test."
    assert phonemes.phonemize(text, "en-us") == conditioning.phonemize([text], ["en-us"])[0]
