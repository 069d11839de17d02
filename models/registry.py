"""Model names → loaders. A name is a preset, a local checkpoint folder, or a Hub repo id."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from models.base import SpeechModel
from models.checkpoint_errors import CheckpointError
from models.loader import read_config, resolve_source

DEFAULT_MODEL = "voxgate-tiny"  # the trained voice shipped in models/voxgate_tiny/weights


@dataclass(frozen=True)
class Preset:
    name: str
    description: str


PRESETS = {
    "tiny-orpheus": Preset(
        "tiny-orpheus", "Orpheus architecture scaled down, seeded random weights (noise)"
    ),
    "orpheus-3b": Preset("orpheus-3b", "canopylabs/orpheus-3b-0.1-ft with SNAC 24 kHz"),
    "tiny-csm": Preset(
        "tiny-csm", "CSM architecture scaled down (Mimi included), seeded random weights (noise)"
    ),
    "csm-1b": Preset("csm-1b", "sesame/csm-1b (transformers layout) with its Mimi codec"),
    "tiny-moshi": Preset(
        "tiny-moshi",
        "Moshi architecture scaled down (Mimi included), seeded random weights (noise)",
    ),
    "moshi-7b": Preset("moshi-7b", "kmhf/hf-moshiko (transformers layout), full duplex"),
    "tiny-cosyvoice2": Preset(
        "tiny-cosyvoice2",
        "CosyVoice 2 scaled down (flow + HiFT, ONNX stand-ins), seeded random weights",
    ),
    "cosyvoice2-0.5b": Preset(
        "cosyvoice2-0.5b", "FunAudioLLM/CosyVoice2-0.5B (Qwen2 LM, flow matching, HiFT)"
    ),
    "tiny-glm-voice": Preset(
        "tiny-glm-voice",
        "GLM-4-Voice scaled down (GLM-4 backbone, speech tokenizer, flow + HiFT decoder), "
        "seeded random weights",
    ),
    "glm-4-voice-9b": Preset(
        "glm-4-voice-9b",
        "THUDM/glm-4-voice-9b + glm-4-voice-tokenizer + glm-4-voice-decoder (22.05 kHz)",
    ),
    # --- Chatterbox (models/chatterbox/) -------------------------------------------------------
    "tiny-chatterbox": Preset(
        "tiny-chatterbox",
        "Chatterbox scaled down (T3 with CFG, S3Gen flow + HiFT), seeded random weights",
    ),
    "chatterbox": Preset(
        "chatterbox", "ResembleAI/chatterbox (T3 0.5B with CFG, S3Gen flow + HiFT, 24 kHz)"
    ),
    # ------------------------------------------------------------------------------------------
    "voxgate-tiny": Preset(
        "voxgate-tiny",
        "Voxgate's own small trained voice (character SpeechLM + VoxCodec, CPU real time)",
    ),
}


def is_voxgate_tiny(model: str) -> bool:
    """Whether `model` names voxgate-tiny (its preset or a local checkpoint folder of it),
    without loading it: the engine's CPU defaults (engine/factory.py) are chosen for it."""
    if model == "voxgate-tiny":
        return True
    if model in PRESETS or not Path(model).expanduser().is_dir():
        return False
    from models.voxgate_tiny.loading import is_voxgate_tiny_config

    try:
        return is_voxgate_tiny_config(read_config(Path(model).expanduser()))
    except CheckpointError:
        return False


@dataclass(frozen=True)
class CosyVoiceOptions:
    """CosyVoice 2's load-time options (docs/models.md); other models refuse any but these
    defaults."""

    first_hop_tokens: int | None = None  # the first audio chunk in tokens (None: its default)
    flow_cache_slots: int = 0  # the cached flow estimator's pool of streams (0: the window)


def load_model(
    model: str = DEFAULT_MODEL,
    codec: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    progress: bool = False,
    random_weights: bool = False,
    voices_dir: str | None = None,
    cosyvoice: CosyVoiceOptions | None = None,
) -> SpeechModel:
    """Load `model` (preset name, folder or repo id). `codec` overrides the model's default codec
    (a repo id or folder). `random_weights` builds a preset's real configuration with seeded
    random weights instead of reading a checkpoint (benchmarks without the download).
    `voices_dir`: reference clips for voice prompting (CSM, CosyVoice 2; see models/csm/voices.py).
    `cosyvoice`: CosyVoice 2's options (first chunk, flow cache)."""
    device = torch.device(device)
    options = cosyvoice or CosyVoiceOptions()
    loaded = _load_cosyvoice2(model, codec, device, dtype, random_weights, options)
    if loaded is not None:
        if voices_dir is not None:
            loaded.add_voices_dir(voices_dir)
        return loaded
    if options.first_hop_tokens is not None:
        raise CheckpointError(
            "--first-hop-tokens sizes CosyVoice 2's first chunk; other models take no such option"
        )
    if options.flow_cache_slots:
        raise CheckpointError(
            "--flow-cache-slots sets CosyVoice 2's flow cache; other models take no such option"
        )
    if model in ("tiny-glm-voice", "glm-4-voice-9b"):
        return _load_glm_voice(model, codec, device, dtype, random_weights, voices_dir)
    chatterbox = _load_chatterbox(model, codec, device, dtype, random_weights, voices_dir)
    if chatterbox is not None:
        return chatterbox
    moshi = _load_moshi(model, codec, device, dtype, progress, random_weights, voices_dir)
    if moshi is not None:
        return moshi
    tiny = _load_voxgate_tiny(model, codec, device, dtype, random_weights, voices_dir)
    if tiny is not None:
        return tiny
    csm = _load_csm(model, codec, device, dtype, progress, random_weights, voices_dir)
    if csm is not None:
        return csm
    if voices_dir is not None:
        raise CheckpointError("--voices-dir works with CSM and CosyVoice 2 models only")
    # Imported only now: Orpheus needs the `snac` package, which other families must not.
    from models.orpheus import configs
    from models.orpheus.loading import is_orpheus_config, load_orpheus
    from models.orpheus.presets import ensure_tiny_orpheus

    if model == "tiny-orpheus":
        model_dir, codec_dir = ensure_tiny_orpheus()
        return load_orpheus(
            str(model_dir), codec or str(codec_dir), device, dtype, progress, name=model
        )
    if model == "orpheus-3b" and random_weights:
        return _random_orpheus_3b(codec, device, dtype)
    if model == "orpheus-3b":
        return load_orpheus(
            configs.REPO_ID, codec or configs.CODEC_REPO_ID, device, dtype, progress, name=model
        )
    if random_weights:
        raise CheckpointError(f"--random-weights works with presets only ({', '.join(PRESETS)})")
    cfg = read_config(resolve_source(model))
    if is_orpheus_config(cfg):
        return load_orpheus(model, codec or configs.CODEC_REPO_ID, device, dtype, progress)
    raise CheckpointError(
        f"{model!r} is not a model Voxgate knows: presets are {', '.join(PRESETS)}; a folder or "
        "repo id must hold a supported checkpoint (Orpheus: Llama config with the audio "
        "vocabulary; CSM: transformers' CsmConfig)"
    )


# --- Chatterbox (models/chatterbox/) -----------------------------------------------------------
def _load_chatterbox(model, codec, device, dtype, random_weights, voices_dir) -> SpeechModel | None:
    """tiny-chatterbox, chatterbox (--random-weights: the real shapes) or a folder in the
    ResembleAI/chatterbox layout; None for anything else."""
    from models.chatterbox.checkpoint import is_chatterbox_folder, load_chatterbox
    from models.chatterbox.model import ChatterboxModel
    from models.chatterbox.presets import ensure_random_chatterbox, ensure_tiny_chatterbox

    folder = Path(model).expanduser()
    if model not in ("tiny-chatterbox", "chatterbox") and not (
        model not in PRESETS and is_chatterbox_folder(folder)
    ):
        return None
    if codec is not None:
        raise CheckpointError("Chatterbox's codec is its own S3Gen; drop --codec")
    if voices_dir is not None:
        raise CheckpointError(
            "Chatterbox voices from clips (--voices-dir) need its voice encoder and S3 tokenizer, "
            "not supported yet; it speaks with the checkpoint's conds.pt voice"
        )
    if model == "tiny-chatterbox":
        if random_weights:
            raise CheckpointError(
                "tiny-chatterbox has random weights already; drop --random-weights"
            )
        folder = ensure_tiny_chatterbox()
    elif model == "chatterbox":
        if not random_weights:
            raise CheckpointError(
                "chatterbox: download ResembleAI/chatterbox (t3_cfg.safetensors, s3gen.safetensors, "
                "ve.safetensors, conds.pt, tokenizer.json) and pass its folder as --model, or "
                "add --random-weights for the real shapes with random weights"
            )
        folder = ensure_random_chatterbox()
    elif random_weights:
        raise CheckpointError(f"--random-weights works with presets only ({', '.join(PRESETS)})")
    name = model if model in PRESETS else "chatterbox"
    return ChatterboxModel(load_chatterbox(folder, device, dtype), name=name)


# ------------------------------------------------------------------------------------------------
def _load_moshi(
    model: str, codec, device, dtype, progress, random_weights, voices_dir
) -> SpeechModel | None:
    """The Moshi family, or None when `model` is not a Moshi preset or checkpoint."""
    from models.moshi import configs
    from models.moshi.loading import is_moshi_config, load_moshi
    from models.moshi.presets import ensure_tiny_moshi, random_moshi_7b

    is_preset = model in ("tiny-moshi", "moshi-7b")
    if not is_preset and (model in PRESETS or random_weights):
        return None
    if not is_preset and not is_moshi_config(read_config(resolve_source(model))):
        return None
    if codec or voices_dir:
        raise CheckpointError(
            "Moshi checkpoints carry their own Mimi codec and one voice; drop --codec / --voices-dir"
        )
    if model == "moshi-7b" and random_weights:
        return random_moshi_7b(device, dtype)
    if random_weights:
        raise CheckpointError("--random-weights works with moshi-7b (tiny-moshi is random already)")
    if model == "tiny-moshi":
        return load_moshi(str(ensure_tiny_moshi()), device, dtype, progress, name=model)
    source = configs.REPO_ID if model == "moshi-7b" else model
    return load_moshi(source, device, dtype, progress, name=model if is_preset else None)


def _load_voxgate_tiny(
    model, codec, device, dtype, random_weights, voices_dir
) -> SpeechModel | None:
    """The voxgate-tiny family, or None when `model` is neither its preset nor its checkpoint."""
    from models.voxgate_tiny.loading import (
        is_voxgate_tiny_config,
        load_voxgate_tiny,
        shipped_weights,
    )
    from models.voxgate_tiny.presets import ensure_random_voxgate_tiny

    if model != "voxgate-tiny":
        if model in PRESETS or random_weights or not Path(model).expanduser().is_dir():
            return None
        if not is_voxgate_tiny_config(read_config(Path(model).expanduser())):
            return None
    if codec or voices_dir:
        raise CheckpointError(
            "voxgate-tiny carries its own codec and one voice; drop --codec / --voices-dir"
        )
    if model == "voxgate-tiny":
        source = ensure_random_voxgate_tiny() if random_weights else shipped_weights()
        return load_voxgate_tiny(source, device, dtype, name=model)
    return load_voxgate_tiny(model, device, dtype)


def _load_csm(
    model: str, codec, device, dtype, progress, random_weights, voices_dir
) -> SpeechModel | None:
    """The CSM family, or None when `model` is not a CSM preset or checkpoint."""
    from models.csm import configs
    from models.csm.loading import is_csm_config, load_csm
    from models.csm.presets import ensure_tiny_csm

    if model in ("tiny-csm", "csm-1b"):
        if random_weights:
            raise CheckpointError("--random-weights is not available for CSM presets yet")
        if codec:
            raise CheckpointError("CSM checkpoints carry their own Mimi codec; drop --codec")
        source = str(ensure_tiny_csm()) if model == "tiny-csm" else configs.REPO_ID
        return load_csm(source, device, dtype, progress, name=model, voices_dir=voices_dir)
    if model in PRESETS or random_weights:
        return None
    folder = resolve_source(model)
    if not is_csm_config(read_config(folder)):
        return None
    return load_csm(str(folder), device, dtype, progress, voices_dir=voices_dir)


def _require_cosyvoice2_extra() -> None:
    import importlib.util

    missing = [
        m for m in ("transformers", "yaml", "onnxruntime") if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise CheckpointError(
            f"CosyVoice 2 needs {', '.join(missing)} (its tokenizer, YAML config and ONNX voice "
            "encoders): pip install 'voxgate[cosyvoice2]'"
        )


def _load_glm_voice(model, codec, device, dtype, random_weights, voices_dir) -> SpeechModel:
    from models.glm_voice import configs
    from models.glm_voice.loading import load_glm_voice
    from models.glm_voice.presets import ensure_tiny_glm_voice, random_glm_voice_9b

    if codec or voices_dir:
        raise CheckpointError(
            "GLM-4-Voice has one voice and its own decoder; drop --codec / --voices-dir"
        )
    if model == "glm-4-voice-9b":
        if random_weights:  # the real backbone shapes, nothing downloaded
            return random_glm_voice_9b(device, dtype)
        env = os.environ.get  # local folders in place of the Hub repo ids
        return load_glm_voice(
            env("VOXGATE_GLM_VOICE_9B", configs.REPO_ID),
            device,
            dtype,
            name=model,
            speech_tokenizer=env("VOXGATE_GLM_VOICE_TOKENIZER", configs.TOKENIZER_REPO_ID),
            decoder=env("VOXGATE_GLM_VOICE_DECODER", configs.DECODER_REPO_ID),
        )
    if random_weights:
        raise CheckpointError("tiny-glm-voice has random weights already; drop --random-weights")
    root = ensure_tiny_glm_voice()
    return load_glm_voice(
        str(root / "glm-4-voice-9b"),
        device,
        dtype,
        name="tiny-glm-voice",
        speech_tokenizer=str(root / "glm-4-voice-tokenizer"),
        decoder=str(root / "glm-4-voice-decoder"),
    )


def _load_cosyvoice2(
    model: str,
    codec,
    device,
    dtype,
    random_weights,
    options: CosyVoiceOptions,
) -> SpeechModel | None:
    """The CosyVoice 2 family, or None when `model` is not a CosyVoice 2 preset or folder."""
    first_hop, cache_slots = options.first_hop_tokens, options.flow_cache_slots
    from pathlib import Path

    from models.cosyvoice2 import configs
    from models.cosyvoice2.loading import is_cosyvoice2_folder, load_cosyvoice2
    from models.cosyvoice2.presets import ensure_real_config, ensure_tiny_cosyvoice2

    preset = model in ("tiny-cosyvoice2", "cosyvoice2-0.5b")
    if not preset and (
        model in PRESETS or random_weights or not is_cosyvoice2_folder(Path(model).expanduser())
    ):
        return None
    _require_cosyvoice2_extra()
    if codec:
        raise CheckpointError(
            "CosyVoice 2 checkpoints carry their own flow + HiFT codec; drop --codec"
        )
    if model == "tiny-cosyvoice2":
        if random_weights:
            raise CheckpointError(
                "tiny-cosyvoice2 has random weights already; drop --random-weights"
            )
        return load_cosyvoice2(
            str(ensure_tiny_cosyvoice2()),
            device,
            dtype,
            name=model,
            first_hop=first_hop,
            flow_cache_slots=cache_slots,
        )
    if model == "cosyvoice2-0.5b":
        if random_weights:  # the real configuration, nothing downloaded
            return load_cosyvoice2(
                str(ensure_real_config()),
                device,
                dtype,
                name=model,
                random_weights=True,
                first_hop=first_hop,
                flow_cache_slots=cache_slots,
            )
        return load_cosyvoice2(
            configs.REPO_ID,
            device,
            dtype,
            name=model,
            first_hop=first_hop,
            flow_cache_slots=cache_slots,
        )
    return load_cosyvoice2(model, device, dtype, first_hop=first_hop, flow_cache_slots=cache_slots)


def _random_orpheus_3b(codec: str | None, device: torch.device, dtype: torch.dtype) -> SpeechModel:
    from snac import SNAC
    from tokenizers import Tokenizer

    from models.codecs.snac_checkpoint import load_snac, snac_24khz_config
    from models.codecs.snac_noise import install_positional_noise
    from models.orpheus import configs
    from models.orpheus.loading import random_orpheus
    from models.orpheus.presets import ensure_tiny_orpheus

    if codec:
        snac = load_snac(codec, device=device)
    else:
        torch.manual_seed(0)
        snac = SNAC(**snac_24khz_config()).to(device).eval()
        install_positional_noise(snac)
    # The tiny preset's tokenizer has Llama 3's special ids; the text tokens of random weights
    # mean nothing anyway.
    model_dir, _ = ensure_tiny_orpheus()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return random_orpheus(
        configs.ORPHEUS_3B, snac, tokenizer, device, dtype, seed=0, name="orpheus-3b"
    )
