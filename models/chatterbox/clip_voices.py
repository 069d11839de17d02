"""Chatterbox voices from reference clips: what ChatterboxTTS.prepare_conditionals computes.

The clip conditions both networks:
- T3: the voice encoder's speaker embedding of the whole clip (16 kHz), and the S3 tokenizer's
  tokens of its first 6 s (at most 150: T3's conditioning prompt);
- S3Gen (S3Token2Mel.embed_ref, on the clip's first 10 s): its 80-bin log-mel at 24 kHz
  (fmax 8 kHz), its speech tokens at 16 kHz (mel and tokens cut to 2 frames a token), and
  CAM++'s x-vector.
The exaggeration is the published default, 0.5. The three encoders come from the checkpoint
(ve.safetensors; s3gen.safetensors' `tokenizer.*` and `speaker_encoder.*`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.base import ModelInputError
from models.chatterbox.campplus import CamPlus, has_campplus, load_campplus
from models.chatterbox.config import T3_FACTS
from models.chatterbox.s3_tokenizer import S3Tokenizer, has_tokenizer, load_s3_tokenizer
from models.chatterbox.s3gen import S3GenVoice
from models.chatterbox.voice_encoder import VoiceEncoder, load_voice_encoder
from models.checkpoint_errors import CheckpointError

T3_CLIP_S = 6.0  # ChatterboxTTS.ENC_COND_LEN
S3GEN_CLIP_S = 10.0  # ChatterboxTTS.DEC_COND_LEN
MAX_CLIP_S = 30.0  # the speech tokenizer's limit
MIN_CLIP_S = 0.5
EXAGGERATION = 0.5  # ChatterboxTTS.generate's default


@dataclass
class ClipEncoders:
    voice_encoder: VoiceEncoder
    tokenizer: S3Tokenizer
    campplus: CamPlus

    def voice(self, name: str, audio16k: np.ndarray, audio24k: np.ndarray):
        """A reference clip (the same audio at 16 and 24 kHz) → a Voice for T3 and S3Gen;
        ModelInputError naming the clip when it cannot make one."""
        from models.chatterbox.checkpoint import T3Voice, Voice
        from models.cosyvoice2.features import prompt_mel

        seconds = len(audio16k) / 16000
        if seconds > MAX_CLIP_S:
            raise ModelInputError(f"voice clip {name!r} is {seconds:.0f} s; at most 30 s")
        if seconds < MIN_CLIP_S:
            raise ModelInputError(f"voice clip {name!r} is too short: give at least 0.5 s")
        try:
            speaker = self.voice_encoder.embed_clip(audio16k)
        except ValueError as exc:
            raise ModelInputError(f"voice clip {name!r}: {exc}") from None
        t3_tokens = self.tokenizer.tokens(
            audio16k[: int(T3_CLIP_S * 16000)], max_tokens=T3_FACTS.speech_cond_prompt_len
        )
        ref24 = np.asarray(audio24k[: int(S3GEN_CLIP_S * 24000)], dtype=np.float32)
        ref16 = np.asarray(audio16k[: int(S3GEN_CLIP_S * 16000)], dtype=np.float32)
        mel = torch.from_numpy(prompt_mel(ref24, fmax=8000.0))
        tokens = self.tokenizer.tokens(ref16)
        n = min(mel.shape[0] // 2, len(tokens))
        s3gen = S3GenVoice(
            torch.tensor(tokens[:n], dtype=torch.long),
            mel[: 2 * n].float(),
            self.campplus.embed_clip(ref16),
        )
        t3 = T3Voice(speaker, torch.tensor(t3_tokens, dtype=torch.long), EXAGGERATION)
        return Voice(t3, s3gen)


def load_clip_encoders(
    ve_state: dict[str, torch.Tensor] | None, s3gen_state: dict[str, torch.Tensor]
) -> ClipEncoders | None:
    """The three encoders, or None when the checkpoint lacks any of them (then the model
    speaks with its conds.pt voice only, and says so when asked for clip voices)."""
    if ve_state is None or not has_tokenizer(s3gen_state) or not has_campplus(s3gen_state):
        return None
    return ClipEncoders(
        load_voice_encoder(ve_state), load_s3_tokenizer(s3gen_state), load_campplus(s3gen_state)
    )


def read_clips(folder: str | Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A voices folder's clips (`NAME.wav`, .flac, .mp3 or .ogg; a `NAME.txt` transcript, which
    CSM and CosyVoice 2 need, is not needed here) → (name, 16 kHz audio, 24 kHz audio)."""
    from models.csm.voices import AUDIO_SUFFIXES, load_audio

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise CheckpointError(f"voices folder {folder} does not exist")
    paths = sorted(p for p in folder.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
    if not paths:
        raise CheckpointError(
            f"voices folder {folder} holds no audio clips ({', '.join(AUDIO_SUFFIXES)})"
        )
    return [(p.stem, load_audio(p, 16000), load_audio(p, 24000)) for p in paths]
