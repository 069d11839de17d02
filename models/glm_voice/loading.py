"""Build a GlmVoiceModel from checkpoint folders in the published layouts."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.glm_voice.backbone import build_glm_backbone, load_chatglm_weights
from models.glm_voice.model import GlmVoiceModel, SpeechTokenDecoder
from models.loader import iter_safetensors, read_config, resolve_source


def is_glm_voice_config(cfg: dict) -> bool:
    return cfg.get("model_type") == "chatglm"


def load_glm_tokenizer(folder: Path):
    """The checkpoint's tokenizer.json. THUDM/glm-4-voice-9b publishes a tiktoken
    `tokenizer.model` with remote code instead; convert it once with transformers
    (AutoTokenizer.from_pretrained(..., trust_remote_code=True) then save a fast tokenizer)."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(
            f"{folder} lacks tokenizer.json; convert the published tiktoken tokenizer.model to a "
            "tokenizer.json first (see models/glm_voice/loading.py)"
        )
    return Tokenizer.from_file(str(path))


def load_glm_backbone(folder: Path, device: torch.device, dtype: torch.dtype):
    cfg = read_config(folder)
    if not is_glm_voice_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not a ChatGLM checkpoint (model_type {cfg.get('model_type')!r})"
        )
    llm = build_glm_backbone(cfg, device, dtype)
    load_chatglm_weights(llm, iter_safetensors(folder))
    return llm.eval()


def load_glm_voice(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    decoder: SpeechTokenDecoder | str | None = None,
    name: str | None = None,
    speech_tokenizer: str | None = None,
) -> GlmVoiceModel:
    """`source`: a THUDM/glm-4-voice-9b folder or repo id; `speech_tokenizer`: a
    THUDM/glm-4-voice-tokenizer folder or repo id (None: text turns only); `decoder`: a
    THUDM/glm-4-voice-decoder folder or repo id, or a built decoder (None: transcript only)."""
    folder = resolve_source(source, required=("config.json",))
    llm = load_glm_backbone(folder, device, dtype)
    speech = None
    if speech_tokenizer is not None:
        from models.glm_voice.speech_tokenizer import load_speech_tokenizer

        tok_folder = resolve_source(speech_tokenizer, required=("config.json",))
        speech = load_speech_tokenizer(tok_folder, device, torch.float32)
    if isinstance(decoder, str):
        from models.glm_voice.decoder_loading import load_glm_decoder

        decoder = load_glm_decoder(decoder, device, dtype)
    return GlmVoiceModel(
        llm, load_glm_tokenizer(folder), decoder, name or folder.name, speech_tokenizer=speech
    )
