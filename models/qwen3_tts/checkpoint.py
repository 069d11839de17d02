"""Qwen3-TTS checkpoints in the published layout (Qwen/Qwen3-TTS-12Hz-*):

  config.json                       Qwen3TTSConfig (model_type "qwen3_tts")
  model.safetensors                 talker.* (and speaker_encoder.* in Base models)
  tokenizer.json | vocab.json …     Qwen2's tokenizer
  speech_tokenizer/config.json      Qwen3TTSTokenizerV2Config ("qwen3_tts_tokenizer_12hz")
  speech_tokenizer/model.safetensors  encoder.* and decoder.*

`load_qwen3_tts` builds the model from such a folder (or a Hub repo id); `write_checkpoint`
writes one with seeded random weights (the tiny preset, `--random-weights`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from models.checkpoint_errors import CheckpointError
from models.codecs.mimi import draw_codebooks
from models.loader import copy_into, iter_safetensors, raise_missing, read_config, resolve_source
from models.qwen3_tts import prompt as P
from models.qwen3_tts.clip_encoder import ClipEncoder
from models.qwen3_tts.codec import DecoderConfig, SpeechDecoder, make_audible
from models.qwen3_tts.model import Qwen3TtsModel
from models.qwen3_tts.predictor import CodePredictor
from models.qwen3_tts.speaker_encoder import SpeakerEncoder
from models.qwen3_tts.talker import Talker

SPEECH_TOKENIZER = "speech_tokenizer"
PATTERNS = ("*.json", "*.safetensors", "*.txt", f"{SPEECH_TOKENIZER}/*")
# generation_config.json of the published checkpoints.
GENERATION_CONFIG = {
    "do_sample": True,
    "repetition_penalty": 1.05,
    "temperature": 0.9,
    "top_p": 1.0,
    "top_k": 50,
    "subtalker_dosample": True,
    "subtalker_temperature": 0.9,
    "subtalker_top_p": 1.0,
    "subtalker_top_k": 50,
    "max_new_tokens": 8192,
}


# config.json's tts_model_type of the variants Voxgate serves.
SERVED_TYPES = ("custom_voice", "voice_design", "base")


def is_qwen3_tts_config(cfg: dict) -> bool:
    return cfg.get("model_type") == "qwen3_tts"


def _speaker_encoder(cfg: dict) -> SpeakerEncoder | None:
    """The Base models' speaker encoder (None for the other variants)."""
    if cfg.get("tts_model_type") != "base":
        return None
    try:
        return SpeakerEncoder(cfg["speaker_encoder_config"])
    except KeyError as missing:
        raise CheckpointError(f"config.json lacks the speaker encoder field {missing}") from None


def _speaker_targets(encoder: SpeakerEncoder | None) -> dict[str, torch.Tensor]:
    if encoder is None:
        return {}
    return {f"speaker_encoder.{n}": p for n, p in encoder.named_parameters()}


def _build(cfg: dict) -> tuple[Talker, CodePredictor]:
    if cfg.get("tokenizer_type") != "qwen3_tts_tokenizer_12hz":
        raise CheckpointError(
            f"tokenizer_type {cfg.get('tokenizer_type')!r} is not supported: Voxgate serves the "
            "12 Hz Qwen3-TTS models (Qwen3-TTS-12Hz-*), whose tokenizer_type is "
            "'qwen3_tts_tokenizer_12hz'"
        )
    try:
        talker = Talker(cfg["talker_config"])
        return talker, CodePredictor(cfg["talker_config"]["code_predictor_config"], talker)
    except KeyError as missing:
        raise CheckpointError(f"config.json lacks the Qwen3-TTS field {missing}") from None


def _speech_tokenizer(
    folder: Path, with_encoder: bool
) -> tuple[SpeechDecoder, int, ClipEncoder | None]:
    """The 12 Hz decoder, its output sample rate, and (`with_encoder`) its encoder."""
    sub = folder / SPEECH_TOKENIZER
    cfg = read_config(sub)
    if cfg.get("model_type") != "qwen3_tts_tokenizer_12hz":
        raise CheckpointError(
            f"{sub}/config.json is not the 12 Hz speech tokenizer (model_type "
            f"{cfg.get('model_type')!r})"
        )
    try:
        decoder = SpeechDecoder(DecoderConfig.from_json(cfg["decoder_config"]))
    except KeyError as missing:
        raise CheckpointError(f"{sub}/config.json lacks the decoder field {missing}") from None
    tensors = dict(iter_safetensors(sub))
    decoder.load_published(tensors)
    encoder = None
    if with_encoder:
        if "encoder_config" not in cfg:
            raise CheckpointError(
                f"{sub}/config.json lacks encoder_config (voice cloning needs it)"
            )
        encoder = ClipEncoder(
            cfg["encoder_config"],
            int(cfg.get("encoder_valid_num_quantizers", 16)),
            int(cfg.get("encode_downsample_rate", 1920)),
        )
        encoder.load(tensors, str(sub))
    return decoder, int(cfg.get("output_sample_rate", 24000)), encoder


def _encoder(folder: Path):
    """text → token ids with the checkpoint's tokenizer (tokenizer.json, else transformers'
    reading of vocab.json + merges.txt)."""
    if (folder / "tokenizer.json").exists():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    if not (folder / "vocab.json").exists():
        raise CheckpointError(
            f"checkpoint folder {folder} has no tokenizer (tokenizer.json or vocab.json)"
        )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


def load_qwen3_tts(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    progress: bool = False,
    name: str | None = None,
    voices_dir: str | None = None,
) -> Qwen3TtsModel:
    folder = resolve_source(
        source, required=("config.json", f"{SPEECH_TOKENIZER}/config.json"), patterns=PATTERNS
    )
    cfg = read_config(folder)
    if not is_qwen3_tts_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not a Qwen3-TTS checkpoint (model_type must be "
            f"'qwen3_tts', got {cfg.get('model_type')!r})"
        )
    if cfg.get("tts_model_type") not in SERVED_TYPES:
        raise CheckpointError(
            f"{folder} is a Qwen3-TTS {cfg.get('tts_model_type')!r} model; Voxgate serves "
            "CustomVoice (preset speakers), VoiceDesign (a voice from a description) and Base "
            "(voices cloned from clips) models"
        )
    if voices_dir is not None and cfg.get("tts_model_type") != "base":
        raise CheckpointError(
            "voices from clips (--voices-dir) need a Qwen3-TTS Base model (its speaker "
            f"encoder); {folder} is a {cfg.get('tts_model_type')} model"
        )
    with torch.device("cpu"):
        talker, predictor = _build(cfg)
        speaker_encoder = _speaker_encoder(cfg)
    targets = {
        **talker.hf_targets(),
        **predictor.hf_targets(),
        **_speaker_targets(speaker_encoder),
    }
    weights = iter_safetensors(folder)
    if progress:
        from tqdm import tqdm

        weights = tqdm(weights, desc=f"loading {folder.name}", unit="tensor")
    seen = copy_into(targets, weights, str(folder))
    raise_missing(sorted(set(targets) - seen), str(folder))
    decoder, sample_rate, clip_encoder = _speech_tokenizer(folder, speaker_encoder is not None)
    # The codec stays float32: a small share of the compute, and chunked audio keeps matching
    # the whole decode to float32 rounding.
    model = Qwen3TtsModel(
        talker.to(device, dtype).eval(),
        predictor.to(device, dtype).eval(),
        decoder.to(device).eval(),
        _encoder(folder),
        P.CodecIds.from_config(cfg),
        no_instruction=_no_instruction(cfg),
        name=name or folder.name,
        sample_rate=sample_rate,
        # Float32 like the codec: one pass per voice, at load.
        speaker_encoder=None if speaker_encoder is None else speaker_encoder.to(device).eval(),
        clip_encoder=None if clip_encoder is None else clip_encoder.to(device),
    )
    if voices_dir is not None:
        from models.csm.voices import read_voices

        for clip in read_voices(voices_dir, sample_rate):
            try:
                model.add_voice(clip.name, clip.audio, clip.text)
            except ValueError as exc:  # ModelInputError: name, length
                raise CheckpointError(f"voice clip {clip.name!r} in {voices_dir}: {exc}") from exc
    return model


def _no_instruction(cfg: dict) -> str | None:
    """Why a checkpoint takes no instruction, as the package's generate functions decide."""
    if cfg.get("tts_model_type") == "base":
        return "a Base model clones the voice of a clip and has no instruction control"
    if cfg.get("tts_model_size") == "0b6":
        return "the 0.6B CustomVoice model has no instruction control; serve a 1.7B model"
    return None


def _seeded(module: nn.Module, std: float = 0.02) -> None:
    """normal(0, std) matrices and embeddings (transformers' init for these models), and
    biases and norm weights drawn near their usual 0 and 1 rather than at them, so that a
    loader that dropped one would show. Its own recipe (by a parameter's shape, not its name),
    not models/random_weights.randomise, whose norms of exactly 1 would change tiny-qwen3-tts'
    weights."""
    for pname, param in module.named_parameters():
        if param.dim() > 1 or pname.endswith("bias"):
            param.normal_(0.0, std)
        else:
            param.normal_(1.0, 0.1)


def _seeded_clip_encoder(codec_cfg: dict) -> ClipEncoder:
    """transformers' own Mimi init, except the codebooks (draw_codebooks)."""
    encoder = ClipEncoder(codec_cfg["encoder_config"], 16, 1920)
    draw_codebooks(encoder.mimi)
    return encoder


@torch.no_grad()
def random_decoder(decoder_config: dict, seed: int) -> SpeechDecoder:
    """A speech decoder of `decoder_config`'s shape with random weights that make audio (on
    the CPU; continues torch's global random stream, as seeded by the caller). Codebooks start
    as zeros in a fresh codec (EMA sums), which would make every code decode alike: random
    centroids make codes matter; then convolutions that carry them to the audio (make_audible:
    PyTorch's own init left the audio within 1 % whatever the codes)."""
    decoder = SpeechDecoder(DecoderConfig.from_json(decoder_config))
    for pname, param in decoder.named_parameters():
        if pname.endswith("embedding_sum"):
            param.normal_()
        elif pname.endswith("cluster_usage"):
            param.uniform_(0.5, 1.5)
        elif param.dim() == 1 and not pname.endswith("bias"):
            param.add_(torch.randn_like(param) * 0.05)  # Snake α/β, norms, layer scales
    return make_audible(decoder, seed)


@torch.no_grad()
def write_checkpoint(folder: Path, cfg: dict, codec_cfg: dict, seed: int, tokenizer=None) -> None:
    """A checkpoint in the published layout with seeded random weights. `tokenizer(folder)`
    writes the tokenizer files (the tiny preset's; real-shape random checkpoints need one)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    talker, predictor = _build(cfg)
    speaker_encoder = _speaker_encoder(cfg)
    _seeded(talker)
    _seeded(predictor)
    if speaker_encoder is not None:
        _seeded(speaker_encoder, std=0.1)
    tensors = {
        **talker.hf_targets(),
        **predictor.hf_targets(),
        **_speaker_targets(speaker_encoder),
    }
    save_file(
        {k: v.contiguous().clone() for k, v in tensors.items()}, str(folder / "model.safetensors")
    )
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    if tokenizer is not None:
        tokenizer(folder)
    sub = folder / SPEECH_TOKENIZER
    sub.mkdir()
    decoder = random_decoder(codec_cfg["decoder_config"], seed)
    tensors = {f"decoder.{k}": v.contiguous() for k, v in decoder.state_dict().items()}
    if "encoder_config" in codec_cfg:
        tensors.update(_seeded_clip_encoder(codec_cfg).published_state())
    save_file(tensors, str(sub / "model.safetensors"))
    (sub / "config.json").write_text(json.dumps(codec_cfg, indent=2))
