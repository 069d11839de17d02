"""Qwen3-TTS in the family table (models/families.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields, replace
from typing import Any

from models.codecs.lane_option import FirstChunkLaneOption
from models.family_spec import Checkpoint, LoadRequest, ModelFamily
from models.request_options import OptionSpec, option_specs, text_option

PRESETS = {
    "tiny-qwen3-tts": "Qwen3-TTS 12 Hz scaled down (talker, code predictor, speech decoder), "
    "seeded random weights (noise)",
    "qwen3-tts-0.6b": "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice (preset speakers)",
    "qwen3-tts-1.7b": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice (preset speakers + instructions)",
    "qwen3-tts-1.7b-voice-design": "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign (a voice from the "
    "instruction's description)",
    "qwen3-tts-0.6b-base": "Qwen/Qwen3-TTS-12Hz-0.6B-Base (voices cloned from --voices-dir clips)",
    "qwen3-tts-1.7b-base": "Qwen/Qwen3-TTS-12Hz-1.7B-Base (voices cloned from --voices-dir clips)",
}


# "auto" and the ten languages of the published checkpoints (their config.json
# `codec_language_id` less the dialects, which a preset speaker brings with it). A served
# checkpoint announces its own list (CodecIds.spoken_languages), which the gateway checks.
LANGUAGES = (
    "auto",
    "chinese",
    "english",
    "french",
    "german",
    "italian",
    "japanese",
    "korean",
    "portuguese",
    "russian",
    "spanish",
)
# The longest instruction a request may give (the package sets none; this bounds the prompt).
MAX_INSTRUCTION_CHARS = 1000


@dataclass(frozen=True)
class Qwen3TtsRequestOptions:
    """What each request may set besides `voice` (the preset speaker or cloned voice), read by
    Qwen3TtsModel.preprocess_with_options (through read_request_options)."""

    language: str = text_option(
        "auto",
        choices=LANGUAGES,
        help="the language to speak: auto (the model tells from the text), or one it lists",
    )
    instruction: str = text_option(
        "",
        max_chars=MAX_INSTRUCTION_CHARS,
        help="how to speak (emotion, pace, style; 1.7B CustomVoice), or the voice's "
        "description (VoiceDesign); empty: none",
    )


def checkpoint_options(
    languages: list[str], no_instruction: str | None, designs_voice: bool
) -> tuple[OptionSpec, ...]:
    """The options a loaded checkpoint announces (ModelFacts.request_options): its own
    languages, and what its instruction does (a VoiceDesign model's describes the voice; a
    model without instruction control says why, and refuses a non-empty one)."""
    language, instruction = option_specs(Qwen3TtsRequestOptions)
    if no_instruction:
        purpose = f"none on this checkpoint ({no_instruction}): leave it empty"
    elif designs_voice:
        purpose = "the voice to design, described in words (VoiceDesign); empty: none"
    else:
        purpose = "how to speak: emotion, pace, style (1.7B CustomVoice); empty: none"
    return language.narrowed(tuple(languages)), replace(instruction, help=purpose)


def read_request_options(given: dict) -> Qwen3TtsRequestOptions:
    """A request's options → Qwen3TtsRequestOptions, the defaults filled in; ModelInputError
    names an unknown option or a value that is not text."""
    from models.base import ModelInputError

    known = {f.name for f in fields(Qwen3TtsRequestOptions)}
    for name, value in given.items():
        if name not in known:
            raise ModelInputError(
                f"unknown model option {str(name)[:64]!r} for Qwen3-TTS; it takes: "
                + ", ".join(sorted(known))
            )
        if not isinstance(value, str):
            raise ModelInputError(f"model option {name} must be text, got {type(value).__name__}")
    return Qwen3TtsRequestOptions(**given)


@dataclass(frozen=True)
class Qwen3TtsLoadOptions(FirstChunkLaneOption):
    """Qwen3-TTS's load-time options: its first chunks on the decoder's lane (on CUDA)."""

    def apply(self, model: Any) -> Any:
        """`model` (a loaded Qwen3TtsModel) with its facts saying how to serve it; returned."""
        model.facts = dataclasses.replace(model.facts, first_chunk_lane=self.first_chunk_lane)
        return model


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.model_type() == "qwen3_tts"


def _load(request: LoadRequest):
    from models.qwen3_tts.checkpoint import load_qwen3_tts
    from models.qwen3_tts.configs import REPO_IDS
    from models.qwen3_tts.presets import ensure_random_qwen3_tts, ensure_tiny_qwen3_tts

    model = request.model
    if model == "tiny-qwen3-tts":
        source = str(ensure_tiny_qwen3_tts())
    elif model in REPO_IDS:
        source = str(ensure_random_qwen3_tts(model)) if request.random_weights else REPO_IDS[model]
    else:
        source = model
    name = model if model in PRESETS else None
    loaded = load_qwen3_tts(
        source, request.device, request.dtype, request.progress, name, request.voices_dir
    )
    return request.options.apply(loaded)


FAMILY = ModelFamily(
    name="Qwen3-TTS",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Qwen3-TTS: config.json model_type 'qwen3_tts' with speech_tokenizer/",
    options=Qwen3TtsLoadOptions,
    request_options=Qwen3TtsRequestOptions,
    own_codec="their own 12 Hz speech tokenizer",
    # Base checkpoints only (load_qwen3_tts refuses --voices-dir for the others).
    takes_voices=True,
    cloning_models="Qwen3-TTS Base",
    random_layouts=frozenset(PRESETS) - {"tiny-qwen3-tts"},
    seeded_presets=frozenset({"tiny-qwen3-tts"}),
)
