"""The published `ResembleAI/chatterbox` layout: reading it, and writing it with seeded random
weights for the tiny preset and `--random-weights` (ChatterboxTTS.from_local's file names,
the official modules' tensor names).

conds.pt, the default voice: `{"t3": T3Cond fields, "gen": S3Gen's reference dict}` —
t3: speaker_emb [1, 256], cond_prompt_speech_tokens [1, 150], emotion_adv [1, 1, 1] (and
clap_emb / cond_prompt_speech_emb, None); gen: prompt_token [1, P], prompt_token_len [1],
prompt_feat [1, 2P, 80], prompt_feat_len (None), embedding [1, 192]."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from models.chatterbox.campplus import CamPlus, CamSizes
from models.chatterbox.clip_voices import ClipEncoders, load_clip_encoders
from models.chatterbox.config import (
    CONDS_FILE,
    S3GEN_FILE,
    SPEECH_CODES,
    T3_FACTS,
    T3_FILE,
    TOKENIZER_FILE,
    VE_FILE,
    T3Sizes,
)
from models.chatterbox.layout import is_chatterbox_folder  # noqa: F401 - re-exported
from models.chatterbox.s3_tokenizer import S3Tokenizer, TokenizerSizes
from models.chatterbox.s3gen import S3Gen, S3GenSizes, S3GenVoice, load_s3gen
from models.chatterbox.t3 import T3, load_t3, t3_state_dict
from models.chatterbox.text import SPACE, TextTokenizer
from models.chatterbox.voice_encoder import VoiceEncoder
from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.audible_weights import make_audible, nudge_off_defaults


@dataclass(frozen=True)
class T3Voice:
    """What T3 takes from a reference clip (conds.pt's `t3`)."""

    speaker: torch.Tensor  # [256]
    prompt_tokens: torch.Tensor  # [P <= 150]
    exaggeration: float


@dataclass(frozen=True)
class Voice:
    t3: T3Voice
    s3gen: S3GenVoice


@dataclass
class Chatterbox:
    t3: T3
    s3gen: S3Gen
    tokenizer: TextTokenizer
    default_voice: Voice
    clip_encoders: ClipEncoders | None = None  # voices from clips (clip_voices.py)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not path.exists():
        raise CheckpointError(f"checkpoint folder {path.parent} lacks {path.name}")
    try:
        return load_file(str(path))
    except Exception as exc:
        raise CheckpointError(f"could not read {path}: {exc}") from exc


def read_conds(path: Path) -> Voice:
    if not path.exists():
        raise CheckpointError(
            f"checkpoint folder {path.parent} lacks {path.name} (the default voice)"
        )
    try:
        raw = torch.load(str(path), map_location="cpu", weights_only=True)
        t3, gen = raw["t3"], raw["gen"]
        speaker = t3["speaker_emb"].reshape(-1).float()
        tokens = t3["cond_prompt_speech_tokens"].reshape(-1).long()
        emotion = float(torch.as_tensor(t3["emotion_adv"]).reshape(-1)[0])
    except (KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{path} is not Chatterbox's conds.pt: {exc}") from None
    if speaker.numel() != T3_FACTS.speaker_embed_size:
        raise CheckpointError(f"{path}: speaker_emb has {speaker.numel()} values, not 256")
    return Voice(T3Voice(speaker, tokens, emotion), S3GenVoice.from_conds(gen))


def load_chatterbox(
    folder: Path,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    flow_dtype: torch.dtype | None = None,
) -> Chatterbox:
    """T3 in `dtype`; S3Gen's flow in `flow_dtype` (None: `dtype`, as CosyVoice 2's flow
    serves in its model's), its HiFT in float32 (the sine source's phase, the iSTFT)."""
    folder = Path(folder)
    t3 = load_t3(read_safetensors(folder / T3_FILE)).to(device, dtype)
    s3gen_state = read_safetensors(folder / S3GEN_FILE)
    s3gen = load_s3gen(s3gen_state).to(device)
    s3gen.flow.to(dtype if flow_dtype is None else flow_dtype)
    ve = folder / VE_FILE
    # The clip encoders run once per voice, on the CPU: no device memory for them.
    clips = load_clip_encoders(read_safetensors(ve) if ve.exists() else None, s3gen_state)
    return Chatterbox(
        t3, s3gen, TextTokenizer(folder / TOKENIZER_FILE), read_conds(folder / CONDS_FILE), clips
    )


# --- writing the layout with seeded random weights ----------------------------------------------


def _seeded(module: nn.Module, seed: int, scale: float) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
            if name.endswith("norm.weight"):
                p.add_(1.0)
    return module


def seeded_s3gen(sizes: S3GenSizes, seed: int) -> S3Gen:
    """S3Gen with seeded random weights whose audio follows its tokens: torch's default init
    for the flow, its norms, biases and relative-position biases moved off their defaults (so a
    mix-up of them shows); HiFT made audible (audible_weights.py). Weights of one fixed scale
    would leave both deaf: the flow's mel stays its starting noise, HiFT's audio ignores it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        s3gen = S3Gen(sizes)
        nudge_off_defaults(s3gen.flow)
        make_audible(s3gen.mel2wav)
    return s3gen.eval()


def _tokenizer_json() -> str:
    """A character-level tokenizers file with the published special ids: [STOP] 0 and [START]
    255 (T3Config's stop/start text tokens), [SPACE] for spaces; printable ASCII after the
    specials."""
    from tokenizers import Regex, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split

    specials = ["[STOP]", "[UNK]", SPACE, "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials + [chr(c) for c in range(33, 127)])}
    vocab["[START]"] = T3_FACTS.start_text
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.add_special_tokens(["[START]", *specials])
    tokenizer.pre_tokenizer = Split(Regex("."), "isolated")
    return tokenizer.to_str()


@dataclass(frozen=True)
class ClipSizes:
    """The clip encoders' sizes in s3gen.safetensors (the voice encoder's are fixed)."""

    tokenizer: TokenizerSizes
    campplus: CamSizes


REAL_CLIP = ClipSizes(TokenizerSizes(1280, 20, 6), CamSizes())
TINY_CLIP = ClipSizes(TokenizerSizes(128, 2, 1), CamSizes(8, 16, 8, 16, (1, 1, 1), 192))


def write_chatterbox_checkpoint(
    folder: Path,
    t3_sizes: T3Sizes,
    s3gen_sizes: S3GenSizes,
    seed: int,
    clip_sizes: ClipSizes = TINY_CLIP,
) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    t3 = _seeded(T3(t3_sizes), seed, 0.05)
    save_file(t3_state_dict(t3), str(folder / T3_FILE))
    s3gen = seeded_s3gen(s3gen_sizes, seed + 1)
    state = {f"flow.{k}": v for k, v in s3gen.flow.state_dict().items()}
    state |= {f"mel2wav.{k}": v for k, v in s3gen.mel2wav.state_dict().items()}
    # The clip encoders: the S3 tokenizer and CAM++ (published in s3gen.safetensors too).
    tokenizer = _seeded(S3Tokenizer(clip_sizes.tokenizer), seed + 5, 0.1)
    with torch.no_grad():  # its quantiser's 8 digits spread over {0, 1, 2}
        tokenizer.quantizer._codebook.project_down.weight.mul_(10.0)
    state |= {f"tokenizer.{k}": v for k, v in tokenizer.state_dict().items()}
    campplus = _seeded(CamPlus(clip_sizes.campplus), seed + 6, 0.1)
    state |= {f"speaker_encoder.{k}": v for k, v in campplus.state_dict().items()}
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / S3GEN_FILE))
    ve = _seeded(VoiceEncoder(), seed + 3, 0.05)
    with torch.no_grad():
        ve.similarity_weight.fill_(10.0)
        ve.similarity_bias.fill_(-5.0)
    save_file({k: v.contiguous() for k, v in ve.state_dict().items()}, str(folder / VE_FILE))
    g = torch.Generator().manual_seed(seed + 4)
    prompt = 50  # 2 s of reference speech for S3Gen
    conds = {
        "t3": {
            "speaker_emb": torch.randn(1, T3_FACTS.speaker_embed_size, generator=g),
            "clap_emb": None,
            "cond_prompt_speech_tokens": torch.randint(
                0, SPEECH_CODES, (1, T3_FACTS.speech_cond_prompt_len), generator=g
            ),
            "cond_prompt_speech_emb": None,
            "emotion_adv": 0.5 * torch.ones(1, 1, 1),
        },
        "gen": {
            "prompt_token": torch.randint(0, SPEECH_CODES, (1, prompt), generator=g),
            "prompt_token_len": torch.tensor([prompt]),
            "prompt_feat": torch.randn(1, 2 * prompt, 80, generator=g),
            "prompt_feat_len": None,
            "embedding": torch.randn(1, 192, generator=g),
        },
    }
    torch.save(conds, str(folder / CONDS_FILE))
    (folder / TOKENIZER_FILE).write_text(_tokenizer_json())
    (folder / "README.txt").write_text(json.dumps({"seed": seed, "random_weights": True}) + "\n")
