"""Qwen3-TTS in the family table (models/families.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from models.checkpoint_errors import CheckpointError
from models.family_spec import Checkpoint, LoadRequest, ModelFamily

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


@dataclass(frozen=True)
class Qwen3TtsRequestOptions:
    """What each request may set besides `voice` (the preset speaker), read by
    Qwen3TtsModel.preprocess_with_options (through read_request_options). Both are text; the
    engine and gateway do not pass request options to models yet, so requests speak with
    these defaults until they do (docs/models.md, Qwen3-TTS)."""

    language: str = field(
        default="auto",
        metadata={"help": "the language to speak: auto, or one the checkpoint lists"},
    )
    instruction: str = field(
        default="",
        metadata={
            "help": "how to speak (emotion, pace, style; 1.7B CustomVoice), or the voice's "
            "description (VoiceDesign); empty: none"
        },
    )


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


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.model_type() == "qwen3_tts"


def _load(request: LoadRequest):
    from models.qwen3_tts.checkpoint import load_qwen3_tts
    from models.qwen3_tts.configs import REPO_IDS
    from models.qwen3_tts.presets import ensure_random_qwen3_tts, ensure_tiny_qwen3_tts

    model = request.model
    request.refuse(
        codec="Qwen3-TTS checkpoints carry their own 12 Hz speech tokenizer; drop --codec"
    )
    if model == "tiny-qwen3-tts":
        if request.random_weights:
            raise CheckpointError(
                "tiny-qwen3-tts has random weights already; drop --random-weights"
            )
        source = str(ensure_tiny_qwen3_tts())
    elif model in REPO_IDS:
        source = str(ensure_random_qwen3_tts(model)) if request.random_weights else REPO_IDS[model]
    else:
        if request.random_weights:
            raise CheckpointError("--random-weights works with the presets " + ", ".join(REPO_IDS))
        source = model
    name = model if model in PRESETS else None
    return load_qwen3_tts(
        source, request.device, request.dtype, request.progress, name, request.voices_dir
    )


FAMILY = ModelFamily(
    name="Qwen3-TTS",
    presets=PRESETS,
    load=_load,
    recognises=_recognises,
    checkpoint_hint="Qwen3-TTS: config.json model_type 'qwen3_tts' with speech_tokenizer/",
)
