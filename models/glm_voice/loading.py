"""Build a GlmVoiceModel from checkpoint folders in the published layouts."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError
from models.glm_voice.backbone import build_glm_backbone, load_chatglm_weights
from models.glm_voice.model import GlmVoiceModel, SpeechTokenDecoder
from models.interleave import InterleaveRule
from models.loader import iter_safetensors, read_config, resolve_source

log = logging.getLogger(__name__)


def is_glm_voice_config(cfg: dict) -> bool:
    return cfg.get("model_type") == "chatglm"


def load_glm_tokenizer(folder: Path):
    """The checkpoint's tokenizer: `tokenizer.json` if the folder has one, else the published
    tiktoken `tokenizer.model` + `tokenizer_config.json` (THUDM/glm-4-voice-9b), converted on
    load (models/glm_voice/tiktoken_convert.py) and cached as tokenizer.json beside them when
    the folder is writable."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    model = folder / "tokenizer.model"
    if not model.exists():
        raise CheckpointError(
            f"{folder} has neither tokenizer.json nor tokenizer.model; download the "
            "checkpoint's tokenizer files (THUDM/glm-4-voice-9b: tokenizer.model, "
            "tokenizer_config.json)"
        )
    from models.glm_voice.tiktoken_convert import tiktoken_to_tokenizer

    tokenizer = tiktoken_to_tokenizer(model, folder / "tokenizer_config.json")
    # Written under a temporary name and renamed, so a concurrent load never reads half a file.
    # Tried rather than checked: os.access says yes to root even on a read-only mount.
    tmp = folder / f".tokenizer.json.{os.getpid()}.tmp"
    try:
        tokenizer.save(str(tmp))
        tmp.replace(path)
        log.info("converted %s to a fast tokenizer, cached at %s", model, path)
    except Exception as e:  # tokenizers reports I/O errors as plain Exception
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        log.info(
            "converted %s to a fast tokenizer, kept in memory (%s is not writable: %s)",
            model,
            folder,
            e,
        )
    return tokenizer


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
    interleave: InterleaveRule | None = None,
) -> GlmVoiceModel:
    """`source`: a THUDM/glm-4-voice-9b folder or repo id; `speech_tokenizer`: a
    THUDM/glm-4-voice-tokenizer folder or repo id (None: text turns only); `decoder`: a
    THUDM/glm-4-voice-decoder folder or repo id, or a built decoder (None: transcript only);
    `interleave`: sample under that block rule (models/interleave.py; random-weights
    benchmarks and their tests; None, trained checkpoints: freely)."""
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
        llm,
        load_glm_tokenizer(folder),
        decoder,
        name or folder.name,
        speech_tokenizer=speech,
        interleave=interleave,
    )
