"""Qwen3-TTS (tiny preset, fp32 on the CPU) against the official qwen-tts package on the same
random weights: the engine's greedy codes equal the official generate's, and the streaming
decoder's audio equals the official speech tokenizer's decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.code_sampling import CodeSamplingInputs, CodeSamplingPlan, DeviceCodeSampler
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.depth_graphs import DepthGraphs
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from engine.sampling import SamplingRow
from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.qwen3_tts.checkpoint import load_qwen3_tts, write_checkpoint
from models.qwen3_tts.configs import (
    TINY_QWEN3_TTS,
    TINY_SPEAKER_ENCODER,
    TINY_SPEECH_TOKENIZER,
    base,
    voice_design,
)
from models.qwen3_tts.tiny_tokenizer import write_tiny_tokenizer
from tests.models.engine_run import run
from tests.models.official_qwen3_tts import run_official
from tests.models.qwen3_tts.qwen3_tts_clip import clip_audio, tiny_cloner

FRAMES = 6
# (text, speaker, language, instruction): the CustomVoice prompt's variants, and VoiceDesign's
# (no speaker; the instruction describes the voice).
CUSTOM_VOICE = [
    ("Hello there.", "ryan", "auto", ""),
    ("A second sentence, a little longer.", "vivian", "english", "Speak slowly and warmly."),
]
VOICE_DESIGN = [("Designed voice.", None, "chinese", "A deep, calm older man's voice.")]
CLONE = [("A cloned voice speaking.", "clip", "english", "")]
ICL_CLONE = [("It goes on speaking.", "icl", "auto", "")]
CLIP_TEXT = "The words said in the clip."

# fp32 rounding of audio in [-1, 1] from a decoder that carries its codes to the audio
# (make_audible), its sums run in another order (chunks, batch rows, the official package):
# measured 2e-5 (ours) and 6e-5 (the package's) at the worst sample.
ROUNDING = 2e-4


@pytest.fixture(scope="module")
def design_folder(tmp_path_factory):
    """The tiny preset as a VoiceDesign checkpoint: the same weights, no preset speakers."""
    folder = tmp_path_factory.mktemp("q3vd") / "model"
    write_checkpoint(
        folder,
        voice_design(TINY_QWEN3_TTS),
        TINY_SPEECH_TOKENIZER,
        seed=0,
        tokenizer=write_tiny_tokenizer,
    )
    return folder


@pytest.fixture(scope="module")
def cloner(tmp_path_factory):
    return tiny_cloner(tmp_path_factory.mktemp("q3base") / "model", CLIP_TEXT)


def _engine_rows(model, asks, frames):
    """Greedy rows through the engine, each request with its own speaker and, as its
    model_options, its language and instruction (the engine hands them to the model's
    preprocess_with_options)."""
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=256, num_kv_blocks=64, block_size=16)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=frames)
    specs = [
        SpeechRequest(
            text, speaker, params, model_options={"language": language, "instruction": told}
        )
        for text, speaker, language, told in asks
    ]
    requests, audio, _, peak = run(core, specs)
    assert [r.model_options for r in requests] == [s.model_options for s in specs]
    assert peak == len(asks)
    assert core.blocks.num_used == 0
    return requests, audio


def _generate_job(model, folder, asks) -> dict:
    encode = model.encode
    return {
        "folder": str(folder),
        "input_ids": [
            encode(f"<|im_start|>assistant\n{t}<|im_end|>\n<|im_start|>assistant\n")
            for t, *_ in asks
        ],
        "instruct_ids": [
            encode(f"<|im_start|>user\n{i}<|im_end|>\n") if i else None for *_, i in asks
        ],
        "languages": [language for _, _, language, _ in asks],
        "speakers": [speaker for _, speaker, _, _ in asks],
        "max_new_tokens": FRAMES,
    }


def test_greedy_codes_and_audio_equal_the_official_package(
    model, folder, design_folder, cloner, tmp_path
):
    designer = load_qwen3_tts(str(design_folder), torch.device("cpu"), torch.float32)
    assert designer.facts.voices == () and designer.facts.default_voice is None
    base_folder, clone_model = cloner
    custom, audio = _engine_rows(model, CUSTOM_VOICE, FRAMES)
    designed, _ = _engine_rows(designer, VOICE_DESIGN, FRAMES)
    cloned, _ = _engine_rows(clone_model, CLONE, FRAMES)
    in_context, icl_audio = _engine_rows(clone_model, ICL_CLONE, FRAMES)
    clone_job = _generate_job(clone_model, base_folder, CLONE)
    clone_job.update(speakers=[None], clone_audio=[clip_audio().tolist()])
    icl_job = _generate_job(clone_model, base_folder, ICL_CLONE)
    icl_job.update(
        speakers=[None],
        clone_audio=[clip_audio().tolist()],
        clone_text_ids=[model.encode(f"<|im_start|>assistant\n{CLIP_TEXT}<|im_end|>\n")],
    )
    reference = clone_model._clones["icl"].reference
    frames = lambda rows: [list(map(int, row[: model.k])) for row in rows]  # noqa: E731
    job = {
        "generate": [
            _generate_job(model, folder, CUSTOM_VOICE),
            _generate_job(designer, design_folder, VOICE_DESIGN),
            clone_job,
            icl_job,
        ],
        "decode": [
            {"folder": str(folder), "frames": [frames(r.output_ids) for r in custom]},
            {
                "folder": str(base_folder),
                "frames": [frames(reference.codes) + frames(in_context[0].output_ids)],
            },
        ],
    }
    official = run_official(job, tmp_path)
    # The x-vector of the clip (mel + speaker encoder) equals the package's.
    np.testing.assert_allclose(
        clone_model.talker.voices[0].numpy(), official["xvector2_0"], atol=1e-5, rtol=1e-5
    )
    # In-context cloning: the clip's codes (the speech tokenizer's encoder) equal the package's.
    np.testing.assert_array_equal(reference.codes, official["refcodes3_0"])
    for j, requests in enumerate((custom, designed, cloned, in_context)):
        for i, request in enumerate(requests):
            got = np.array([row[: model.k] for row in request.output_ids])
            want = official[f"codes{j}_{i}"]
            assert len(want) > 0
            np.testing.assert_array_equal(got[: len(want)], want)
            # Every row's text column is tts_pad: the next step's text input (non-streaming).
            assert {row[model.k] for row in request.output_ids} == {model.ids.tts_pad}
    for i, request in enumerate(custom):
        pcm = np.concatenate(audio[request.request_id])
        assert pcm.shape == (len(request.output_ids) * 1920,)
        np.testing.assert_allclose(pcm, official[f"audio0_{i}"], atol=ROUNDING, rtol=0)
    # The cloned speech's audio is the package's decode of clip + speech, the clip's part cut.
    pcm = np.concatenate(icl_audio[in_context[0].request_id])
    np.testing.assert_allclose(
        pcm, official["audio1_0"][len(reference.codes) * 1920 :], atol=ROUNDING, rtol=0
    )


def test_prompt_rows_follow_the_custom_voice_layout(model):
    ids = model.ids
    rows = model.preprocess_with_options("Hi.", "Ryan", {"language": "english"}).token_ids
    k = model.k
    codec = [row[0] for row in rows if row[0] >= 0]
    assert codec[:6] == [ids.think, ids.think_bos, 2050, ids.think_eos, 3061, ids.pad]
    assert codec[-1] == ids.bos and rows[-1][k] == ids.tts_pad
    assert rows[len(rows) - len(codec) + 5][k] == ids.tts_bos  # the codec pad row
    assert rows[-2][k] == ids.tts_eos
    assert all(set(row[1:k]) == {-1} for row in rows)


def test_an_instruction_comes_before_the_prompt_and_changes_nothing_else(model):
    """The instruction is the user turn before the assistant's (the package's
    _build_instruct_text); the rest of the prompt is the one without it."""
    plain = model.preprocess_with_options("Hi.", "ryan", {"language": "auto", "instruction": ""})
    told = model.preprocess_with_options(
        "Hi.", "ryan", {"language": "auto", "instruction": "Whisper."}
    )
    turn = model.encode("<|im_start|>user\nWhisper.<|im_end|>\n")
    assert told.token_ids[len(turn) :] == plain.token_ids
    assert [row[model.k] for row in told.token_ids[: len(turn)]] == turn
    assert all(set(row[: model.k]) == {-1} for row in told.token_ids[: len(turn)])
    assert model.preprocess("Hi.", "ryan").token_ids == plain.token_ids


def test_each_checkpoint_announces_its_languages_and_what_an_instruction_does(
    model, design_folder, cloner
):
    """The family's options, narrowed to the checkpoint: its own languages (the tiny preset
    has three of the published ten), and the instruction's role in its variant."""
    from models.qwen3_tts.family import LANGUAGES, Qwen3TtsRequestOptions
    from models.request_options import option_specs, same_options

    language, instruction = model.facts.request_options
    assert language.kind == instruction.kind == "text"
    assert language.choices == tuple(model.ids.spoken_languages())
    assert language.choices == ("auto", "chinese", "english", "french")
    assert set(language.choices) < set(LANGUAGES) and language.default == "auto"
    assert instruction.max_chars == 1000 and instruction.default == ""
    assert "how to speak" in instruction.help
    assert same_options(model.facts.request_options, option_specs(Qwen3TtsRequestOptions))
    designer = load_qwen3_tts(str(design_folder), torch.device("cpu"), torch.float32)
    assert "voice to design" in designer.facts.request_options[1].help
    _, clone_model = cloner
    assert "none on this checkpoint" in clone_model.facts.request_options[1].help


def test_bad_requests_get_clear_errors(model):
    with pytest.raises(ModelInputError, match="unknown voice"):
        model.preprocess("Hi.", "nobody")
    with pytest.raises(ModelInputError, match="empty"):
        model.preprocess("   ", None)
    with pytest.raises(ModelInputError, match="unknown language 'klingon'.*english"):
        model.preprocess_with_options("Hi.", None, {"language": "klingon"})
    with pytest.raises(ModelInputError, match="instruction"):
        model.preprocess_with_options("Hi.", None, {"instruction": "x" * 1001})
    with pytest.raises(ModelInputError, match="unknown model option 'speed'.*instruction"):
        model.preprocess_with_options("Hi.", None, {"speed": "fast"})
    with pytest.raises(ModelInputError, match="language must be text"):
        model.preprocess_with_options("Hi.", None, {"language": 3})


def test_voice_design_prompt_has_no_speaker_and_refuses_one(design_folder):
    designer = load_qwen3_tts(str(design_folder), torch.device("cpu"), torch.float32)
    prompt = designer.preprocess_with_options("Hi.", None, {"instruction": "A bright voice."})
    rows = prompt.token_ids
    codec = [row[0] for row in rows if row[0] >= 0]
    ids = designer.ids
    assert codec[:4] == [ids.nothink, ids.think_bos, ids.think_eos, ids.pad]
    with pytest.raises(ModelInputError, match="no preset speakers"):
        designer.preprocess("Hi.", "ryan")


@torch.inference_mode()
def test_depth_stage_replays_from_static_buffers_as_it_runs_eagerly(model):
    """What a CUDA-graph replay of the code predictor runs (engine/depth_graphs.py), on the
    CPU: padding rows, greedy and sampled rows, the same codes as the eager stage."""
    rows = [
        SamplingRow("a", SamplingParams(temperature=0.9, top_k=50, top_p=1.0, seed=1), step=3),
        SamplingRow("b", SamplingParams(temperature=0.0, top_p=1.0), step=4),
        SamplingRow("c", SamplingParams(temperature=0.9, top_k=50, top_p=1.0, seed=2), step=5),
    ]
    seeds = [7, 8, 9]
    hidden = torch.randn(3, model.shape.hidden_size, generator=torch.Generator().manual_seed(5))
    first = torch.tensor([3, 2047, model.ids.eos])
    graphs = DepthGraphs(
        model.depth_stage, model.shape.hidden_size, torch.float32, torch.device("cpu"), (1, 4), 64
    )
    assert graphs.bucket_for(3) == 4 and graphs.fits(3, CodeSamplingPlan.of(rows))
    cpu = torch.device("cpu")
    static = graphs.run_static(hidden, first, CodeSamplingInputs.upload(rows, seeds, cpu))
    eager = model.depth_stage(hidden, first, DeviceCodeSampler.for_rows(rows, seeds, cpu))
    assert static.shape == (3, model.k + 1)
    assert torch.equal(static, eager)
    assert int(static[:, 1 : model.k].max()) < 2048


def test_the_end_code_is_barred_from_the_first_two_frames(model):
    hidden = torch.zeros(3, model.shape.hidden_size)
    cands = model.candidate_logits(hidden, [0, 1, 2], [True, True, True])
    end = cands.logits[:, -1]
    assert int(cands.token_ids[0, -1]) == model.ids.eos
    assert torch.isinf(end[:2]).all() and bool(torch.isfinite(end[2]))
    assert cands.logits.shape == (3, 2049)


def test_base_model_clones_voices_from_a_voices_folder(cloner, tmp_path):
    from gateway.synth import write_wav

    folder, _ = cloner
    write_wav(tmp_path / "anna.wav", clip_audio(), 24000)
    (tmp_path / "anna.txt").write_text("What the clip says.")
    model = load_qwen3_tts(
        str(folder), torch.device("cpu"), torch.float32, voices_dir=str(tmp_path)
    )
    assert model.facts.voices == model.facts.clip_voices == ("anna",)
    assert model.facts.voice_cloning and model.facts.default_voice == "anna"
    rows = model.preprocess("Hi.", "anna").token_ids
    assert model.talker.args.vocab_size in [row[0] for row in rows]  # the voice's row
    with pytest.raises(ModelInputError, match="unknown voice 'ryan'.*anna"):
        model.preprocess("Hi.", "ryan")
    with pytest.raises(ModelInputError, match="no instruction"):
        model.preprocess_with_options("Hi.", None, {"instruction": "Loud."})


def test_clients_clips_clone_as_the_voices_folders_do(cloner, model, tmp_path):
    """A client's clip (decoded and checked as the gateway does, add_clip_voice) makes the
    same prompt as the same clip in --voices-dir: with its transcript the clip's text and
    codes (in-context), without it the x-vector alone; unlisted, and gone when removed. The
    clip is at 16 kHz: both paths resample it to the model's 24 kHz."""
    from gateway.clip_audio import read_clip
    from gateway.synth import write_wav

    folder, _ = cloner
    t = np.arange(40000) / 16000  # 2.5 s at 16 kHz
    audio = 0.4 * np.sin(2 * np.pi * (180 + 90 * t) * t) + 0.05 * np.random.default_rng(
        0
    ).standard_normal(t.size)
    write_wav(tmp_path / "icl.wav", audio, 16000)
    wav = (tmp_path / "icl.wav").read_bytes()
    (tmp_path / "xvec.wav").write_bytes(wav)
    for name, transcript in (("icl", CLIP_TEXT), ("xvec", "")):
        (tmp_path / f"{name}.txt").write_text(transcript)
    base = load_qwen3_tts(str(folder), torch.device("cpu"), torch.float32, voices_dir=str(tmp_path))
    facts = base.facts
    assert facts.voice_cloning and not facts.clip_rules.needs_transcript
    free = len(base.talker._free_slots)
    for name, transcript in (("icl", CLIP_TEXT), ("xvec", "")):
        clip = read_clip(wav, transcript, facts, 2**20)
        nbytes = base.add_clip_voice(f"clip-{name}", clip)
        mine, theirs = base.preprocess("Hi.", f"clip-{name}"), base.preprocess("Hi.", name)
        mine_rows, their_rows = torch.tensor(mine.token_ids), torch.tensor(theirs.token_ids)
        # The speaker row names another slot of the talker's table, holding the same x-vector.
        assert (mine_rows != their_rows).sum() == 1
        torch.testing.assert_close(base.talker.embed(mine_rows), base.talker.embed(their_rows))
        assert (
            mine.extras.keys()
            == theirs.extras.keys()
            == ({"reference_codes"} if transcript else set())
        )
        if transcript:
            np.testing.assert_array_equal(
                mine.extras["reference_codes"], theirs.extras["reference_codes"]
            )
        codes = np.asarray(mine.extras.get("reference_codes", np.zeros(0, np.int64)))
        assert nbytes >= base.talker.voices[0].nbytes + codes.nbytes
    assert base.facts.voices == ("icl", "xvec")  # clients' voices are not listed
    assert len(base.talker._free_slots) == free - 2
    with pytest.raises(ModelInputError, match="taken"):
        base.add_clip_voice("icl", clip)
    for name in ("clip-icl", "clip-xvec"):
        base.remove_clip_voice(name)
        with pytest.raises(ModelInputError, match=f"unknown voice '{name}'"):
            base.preprocess("Hi.", name)
    assert len(base.talker._free_slots) == free  # their slots are free again
    # CustomVoice (and VoiceDesign) models cannot clone: the gateway refuses their clips.
    assert not model.facts.voice_cloning
    with pytest.raises(ModelInputError, match="need a Base model"):
        model.add_clip_voice("clip-x", clip)


def test_a_full_voice_table_refuses_until_a_voice_is_removed():
    from models.qwen3_tts.talker import Talker

    talker = Talker(base(TINY_QWEN3_TTS, TINY_SPEAKER_ENCODER)["talker_config"])
    talker.reserve_voices(1)
    row = talker.add_voice(torch.ones(talker.args.hidden_size))
    with pytest.raises(ModelInputError, match="holds 1 cloned voices, its most: remove one"):
        talker.add_voice(torch.ones(talker.args.hidden_size))
    talker.remove_voice(row)
    assert talker.add_voice(torch.full((talker.args.hidden_size,), 2.0)) == row
    assert float(talker.voices[0, 0]) == 2.0


def test_voices_folder_needs_a_base_model(folder, tmp_path):
    with pytest.raises(CheckpointError, match="Base model"):
        load_qwen3_tts(str(folder), torch.device("cpu"), torch.float32, voices_dir=str(tmp_path))
