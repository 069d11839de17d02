"""Build a StepAudio2Model from stepfun-ai/Step-Audio-2-mini's layout: config.json
(model_type "step_audio_2"), model*.safetensors (`model.*` + `lm_head.weight`: the Qwen2
decoder; `encoder.*` + `adapter.*`: the audio-input stage), tokenizer.json, and a token2wav
folder (token2wav.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from models.checkpoint_errors import CheckpointError, check_state_dict
from models.interleave import InterleaveRule
from models.layers.llama import LlamaArgs, LlamaForCausalLM
from models.loader import iter_safetensors, read_config, resolve_source
from models.random_weights import randomise
from models.step_audio2.audio_encoder import AudioEncoderConfig, AudioInput
from models.step_audio2.audio_slots import DEFAULT_SLOTS
from models.step_audio2.model import StepAudio2Model

MODEL_TYPE = "step_audio_2"
_TEXT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "tie_word_embeddings",
)


def is_step_audio2_config(cfg: dict) -> bool:
    return cfg.get("model_type") == MODEL_TYPE


def text_fields(cfg: dict) -> dict:
    """The decoder's Qwen2 fields: `text_config`, or the top level in flat exports."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        text = {k: cfg[k] for k in _TEXT_FIELDS if k in cfg}
    return {**text, "model_type": "qwen2"}  # Qwen2: biases on q/k/v


def decoder_args(cfg: dict) -> LlamaArgs:
    return LlamaArgs.from_hf_config(text_fields(cfg))


def audio_config(cfg: dict) -> AudioEncoderConfig:
    raw = cfg.get("audio_encoder_config")
    if not isinstance(raw, dict):
        raise CheckpointError("config.json lacks Step-Audio 2's audio_encoder_config")
    audio = AudioEncoderConfig.from_config(raw)
    hidden = decoder_args(cfg).hidden_size
    if audio.llm_dim != hidden:
        raise CheckpointError(
            f"audio_encoder_config.llm_dim {audio.llm_dim} differs from the decoder's "
            f"hidden_size {hidden}: config.json is inconsistent"
        )
    return audio


def build_parts(cfg: dict, device: torch.device, dtype: torch.dtype):
    args = decoder_args(cfg)
    with torch.device(device):
        llm, audio = LlamaForCausalLM(args), AudioInput(audio_config(cfg))
    return llm.to(dtype), audio.to(dtype)


def load_weights(llm: LlamaForCausalLM, audio: AudioInput, folder: Path) -> None:
    decoder, audio_sd = [], {}
    for name, tensor in iter_safetensors(folder):
        if name.startswith(("encoder.", "adapter.")):
            audio_sd[name] = tensor
        else:
            decoder.append((name, tensor))
    llm.load_hf_weights(decoder)
    check_state_dict(audio.state_dict(), audio_sd, "the audio encoder's and adapter's tensors")
    audio.load_state_dict(audio_sd)


def load_tokenizer(folder: Path):
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.exists():
        raise CheckpointError(
            f"{folder} lacks tokenizer.json; download the checkpoint's tokenizer files "
            "(stepfun-ai/Step-Audio-2-mini)"
        )
    return Tokenizer.from_file(str(path))


def load_step_audio2(
    source: str,
    device: torch.device,
    dtype: torch.dtype,
    name: str | None = None,
    token2wav: str | None = None,
    random_weights: bool = False,
    audio_slots: int = DEFAULT_SLOTS,
    prompt_wav: str | None = None,
    codec=None,
    interleave: InterleaveRule | None = None,
    flow_dtype: torch.dtype | None = None,
) -> StepAudio2Model:
    """`source`: a Step-Audio-2-mini folder or repo id. `token2wav`: a token2wav folder
    (token2wav.py; None: transcript only). `random_weights`: the folder's config and
    tokenizer with seeded random weights (GPU benchmarks of the real shapes). `codec`: a
    built token2wav in place of `token2wav`. `interleave`: sample under that block rule
    (models/interleave.py; random-weights benchmarks and their tests; None: freely).
    `flow_dtype`: the token2wav flow's (None: `dtype`); its HiFT is float32."""
    folder = Path(source) if random_weights else resolve_source(source, required=("config.json",))
    cfg = read_config(folder)
    if not is_step_audio2_config(cfg):
        raise CheckpointError(
            f"{folder}/config.json is not a Step-Audio 2 checkpoint "
            f"(model_type {cfg.get('model_type')!r}, wants {MODEL_TYPE!r})"
        )
    torch.manual_seed(0)
    llm, audio = build_parts(cfg, device, dtype)
    if random_weights:
        # The audio encoder's LayerNorms are named `*_ln`; its biases start at 0.
        randomise(llm, audio, zero_biases=True, norm_names=("norm", "_ln.weight"))
    else:
        load_weights(llm, audio, folder)
    if token2wav is not None:
        from models.step_audio2.token2wav import load_token2wav

        flow_dtype = dtype if flow_dtype is None else flow_dtype
        codec = load_token2wav(Path(token2wav), device, flow_dtype, prompt_wav)
    return StepAudio2Model(
        llm.eval(),
        audio.eval(),
        load_tokenizer(folder),
        codec,
        name or folder.name,
        audio_slots=audio_slots,
        interleave=interleave,
    )
