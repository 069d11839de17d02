"""Step-Audio 2 in the family table (models/families.py): turn-based speech-to-speech with
audio input through its own encoder, served from its presets or a Step-Audio-2-mini folder."""

from __future__ import annotations

import os

from models.codecs.flow_hift.serving_options import FlowHiftOptions
from models.family_spec import Checkpoint, LoadRequest, ModelFamily

TOKEN2WAV_ENV = "VOXGATE_STEP_AUDIO2_TOKEN2WAV"
# The voice of Step-Audio 2's own token2wav: a speaker clip (StepFun's repo ships
# assets/default_female.wav); the published token2wav/ folder has no preset speaker.
PROMPT_WAV_ENV = "VOXGATE_STEP_AUDIO2_PROMPT_WAV"


def _token2wav_folder(folder: str) -> str | None:
    """The token2wav to use: $VOXGATE_STEP_AUDIO2_TOKEN2WAV ("none": transcript only), else
    the checkpoint's own `token2wav/`."""
    chosen = os.environ.get(TOKEN2WAV_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() == "none" else chosen
    return os.path.join(folder, "token2wav")


def _load(request: LoadRequest):
    """The model, served with the token2wav options the user set."""
    return request.options.apply(_load_model(request))


def _load_model(request: LoadRequest):
    from models.step_audio2 import configs
    from models.step_audio2.loading import load_step_audio2
    from models.step_audio2.presets import ensure_real_config, ensure_tiny_step_audio2

    device, dtype = request.device, request.dtype
    flow_dtype = request.options.flow_dtype(dtype)
    if request.model == "tiny-step-audio2":
        root = ensure_tiny_step_audio2()
        return load_step_audio2(
            str(root),
            device,
            dtype,
            "tiny-step-audio2",
            token2wav=str(root / "token2wav"),
            flow_dtype=flow_dtype,
        )
    if request.random_weights:  # the real decoder and encoder shapes, nothing downloaded
        from models.step_audio2.model import RANDOM_WEIGHTS_INTERLEAVE
        from models.step_audio2.token2wav import random_token2wav

        return load_step_audio2(
            str(ensure_real_config()),
            device,
            dtype,
            request.model,
            random_weights=True,
            codec=random_token2wav(device, flow_dtype),
            # Random weights keep no text/speech mix: a benchmark deviation (docs/models.md).
            interleave=RANDOM_WEIGHTS_INTERLEAVE,
        )
    source = (
        os.environ.get("VOXGATE_STEP_AUDIO2_MINI", configs.REPO_ID)
        if request.model == "step-audio2-mini"
        else request.model
    )
    from models.loader import resolve_source

    folder = resolve_source(source, required=("config.json",))
    return load_step_audio2(
        str(folder),
        device,
        dtype,
        request.model,
        token2wav=_token2wav_folder(str(folder)),
        prompt_wav=os.environ.get(PROMPT_WAV_ENV) or None,
        flow_dtype=flow_dtype,
    )


def _recognises(checkpoint: Checkpoint) -> bool:
    return checkpoint.model_type() == "step_audio_2"


FAMILY = ModelFamily(
    name="Step-Audio 2",
    presets={
        "tiny-step-audio2": "Step-Audio 2 scaled down (audio encoder + adapter, Qwen2 decoder, "
        "its DiT flow + HiFT token2wav), seeded random weights",
        "step-audio2-mini": "stepfun-ai/Step-Audio-2-mini (its DiT flow + HiFT token2wav, "
        f"24 kHz; voice clip: ${PROMPT_WAV_ENV})",
    },
    load=_load,
    recognises=_recognises,
    checkpoint_hint="a Step-Audio-2-mini folder (config.json model_type step_audio_2)",
    options=FlowHiftOptions,
    tool_calls=True,
    own_codec="their own token2wav and one voice",
    random_layouts=frozenset({"step-audio2-mini"}),
    seeded_presets=frozenset({"tiny-step-audio2"}),
)
