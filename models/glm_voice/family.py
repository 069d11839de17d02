"""GLM-4-Voice in the family table (models/families.py): turn-based speech-to-speech, served
from its presets (three repos: the backbone, the speech tokenizer and the decoder)."""

from __future__ import annotations

import os

from models.family_spec import LoadRequest, ModelFamily


def _load(request: LoadRequest):
    from models.glm_voice import configs
    from models.glm_voice.loading import load_glm_voice
    from models.glm_voice.presets import ensure_tiny_glm_voice, random_glm_voice_9b

    device, dtype = request.device, request.dtype
    if request.model == "glm-4-voice-9b":
        if request.random_weights:  # the real backbone shapes, nothing downloaded
            return random_glm_voice_9b(device, dtype)
        env = os.environ.get  # local folders in place of the Hub repo ids
        return load_glm_voice(
            env("VOXGATE_GLM_VOICE_9B", configs.REPO_ID),
            device,
            dtype,
            name=request.model,
            speech_tokenizer=env("VOXGATE_GLM_VOICE_TOKENIZER", configs.TOKENIZER_REPO_ID),
            decoder=env("VOXGATE_GLM_VOICE_DECODER", configs.DECODER_REPO_ID),
        )
    from models.glm_voice.model import TRAINED_INTERLEAVE

    root = ensure_tiny_glm_voice()
    return load_glm_voice(
        str(root / "glm-4-voice-9b"),
        device,
        dtype,
        name="tiny-glm-voice",
        speech_tokenizer=str(root / "glm-4-voice-tokenizer"),
        decoder=str(root / "glm-4-voice-decoder"),
        # Random weights keep no text/speech mix: without the trained format a reply may draw
        # no speech code at all (about one 1-s reply in 40), so the preset speaks in every
        # reply as the trained model does (docs/models.md).
        interleave=TRAINED_INTERLEAVE,
    )


FAMILY = ModelFamily(
    name="GLM-4-Voice",
    presets={
        "tiny-glm-voice": "GLM-4-Voice scaled down (GLM-4 backbone, speech tokenizer, flow + HiFT "
        "decoder), seeded random weights",
        "glm-4-voice-9b": "THUDM/glm-4-voice-9b + glm-4-voice-tokenizer + glm-4-voice-decoder "
        "(22.05 kHz)",
    },
    load=_load,
    random_layouts=frozenset({"glm-4-voice-9b"}),
    seeded_presets=frozenset({"tiny-glm-voice"}),
    own_codec="their own decoder (flow + HiFT) and one voice",
)
