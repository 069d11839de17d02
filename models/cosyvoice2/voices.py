"""Voices of CosyVoice 2: preset speakers from spk2info.pt, and voice prompts made from a
reference clip and its transcript (the zero-shot mode), encoded once and cached by name.

A voice prompt carries what CosyVoice's frontend_zero_shot computes: the transcript's text ids,
the clip's speech tokens (speech_tokenizer_v2.onnx on Whisper log-mel), its CAM++ x-vector
(campplus.onnx on Kaldi fbank) and its 24 kHz mel, trimmed to 2 mel frames per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from models.base import ModelInputError
from models.checkpoint_errors import CheckpointError
from models.cosyvoice2 import features

SPEECH_TOKENIZER = "speech_tokenizer_v2.onnx"
SPEAKER_ENCODER = "campplus.onnx"
MAX_PROMPT_S = 30.0  # the speech tokenizer's limit


@dataclass(frozen=True)
class Voice:
    name: str
    embedding: torch.Tensor  # [192] CAM++ x-vector
    text_ids: list[int] = field(default_factory=list)  # the prompt's transcript
    llm_tokens: list[int] = field(default_factory=list)  # its speech tokens, for the LLM prompt
    flow_tokens: list[int] = field(default_factory=list)  # the same, cut to whole chunks
    mel: torch.Tensor = field(
        default_factory=lambda: torch.zeros(0, 80)
    )  # [2 * len(flow_tokens), 80]


class PromptEncoder:
    """The two ONNX models of the checkpoint folder, run with onnxruntime on the CPU."""

    def __init__(self, folder: Path, tokenizer: str = SPEECH_TOKENIZER) -> None:
        """`tokenizer`: the speech tokenizer's file (Step-Audio 2 names it
        speech_tokenizer_v2_25hz.onnx)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.tokenizer = ort.InferenceSession(
            str(folder / tokenizer), options, providers=["CPUExecutionProvider"]
        )
        self.speaker = ort.InferenceSession(
            str(folder / SPEAKER_ENCODER), options, providers=["CPUExecutionProvider"]
        )

    def speech_tokens(self, audio16k: np.ndarray) -> list[int]:
        feats = features.whisper_log_mel(audio16k)[None]
        names = [i.name for i in self.tokenizer.get_inputs()]
        out = self.tokenizer.run(
            None, {names[0]: feats, names[1]: np.array([feats.shape[2]], dtype=np.int32)}
        )[0]
        return [int(t) for t in np.asarray(out).reshape(-1)]

    def embedding(self, audio16k: np.ndarray) -> torch.Tensor:
        feats = features.kaldi_fbank(audio16k)[None]
        out = self.speaker.run(None, {self.speaker.get_inputs()[0].name: feats})[0]
        return torch.from_numpy(np.asarray(out, dtype=np.float32).reshape(-1))


class VoiceBank:
    def __init__(
        self, presets: dict[str, Voice], chunk: int, speaker_dim: int, encoder: PromptEncoder | None
    ) -> None:
        self.chunk = chunk
        self.encoder = encoder
        self._voices = dict(presets)  # presets and --voices-dir voices: listed
        self._clients: dict[str, Voice] = {}  # clients' voices (add_clip_voice): unlisted
        # Without presets a request with no voice gets a zero x-vector (no speaker conditioning).
        self._neutral = Voice("neutral", torch.zeros(speaker_dim))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._voices)

    @property
    def default(self) -> str | None:
        return next(iter(self._voices), None)

    def get(self, name: str | None) -> Voice:
        if name is None:
            return self._voices[self.default] if self.default else self._neutral
        # One lookup each: a client's voice may be removed from another thread meanwhile.
        voice = self._voices.get(name) or self._clients.get(name)
        if voice is None:
            raise ModelInputError(
                f"unknown voice {name!r}; choose one of {', '.join(self._voices) or '(none)'}"
            )
        return voice

    def remove_client_voice(self, name: str) -> None:
        self._clients.pop(name, None)

    def add_voice(
        self,
        name: str,
        text_ids: list[int],
        audio16k: np.ndarray,
        audio24k: np.ndarray,
        client: bool = False,
        max_chunks: int | None = None,
    ) -> Voice:
        """Encode a reference clip once; later requests with voice=name reuse it. `client`:
        a client's voice, served but not listed (nor ever the default). `max_chunks`: the
        flow's prompt keeps at most this many chunks, the clip's last (the LLM's prompt keeps
        every token), as it keeps whole chunks only."""
        if self.encoder is None:
            raise CheckpointError(
                f"voice prompts need {SPEECH_TOKENIZER} and {SPEAKER_ENCODER} in the checkpoint"
            )
        if len(audio16k) > MAX_PROMPT_S * 16000:
            raise ModelInputError(f"reference clip {name!r} is longer than {MAX_PROMPT_S:.0f} s")
        tokens = self.encoder.speech_tokens(audio16k)
        mel = torch.from_numpy(features.prompt_mel(audio24k))
        n = min(mel.shape[0] // 2, len(tokens))  # frontend_zero_shot's 2:1 alignment
        # The flow's chunks count from the prompt's first token: a prompt of whole chunks keeps
        # every generated chunk aligned, so the first audio needs one chunk + look-ahead.
        usable = n - n % self.chunk
        if max_chunks is not None:
            usable = min(usable, max_chunks * self.chunk)
        if usable == 0:
            raise ModelInputError(
                f"reference clip {name!r} is too short: it needs at least {self.chunk} speech tokens "
                f"({self.chunk / 25:.0f} s)"
            )
        flow_tokens = tokens[n - usable : n]
        voice = Voice(
            name,
            self.encoder.embedding(audio16k),
            list(text_ids),
            tokens[:n],
            flow_tokens,
            mel[2 * (n - usable) : 2 * n].float(),
        )
        (self._clients if client else self._voices)[name] = voice
        return voice


def read_spk2info(path: Path, speaker_dim: int) -> dict[str, Voice]:
    """spk2info.pt: {speaker id: {"embedding": [1, 192], ...}} (CosyVoice's SFT speakers)."""
    if not path.exists():
        return {}
    info = torch.load(str(path), map_location="cpu", weights_only=True)
    voices = {}
    for name, entry in info.items():
        emb = (
            torch.as_tensor(entry["embedding"] if isinstance(entry, dict) else entry)
            .float()
            .reshape(-1)
        )
        if emb.numel() != speaker_dim:
            raise CheckpointError(
                f"spk2info.pt speaker {name!r}: embedding of {emb.numel()}, wants {speaker_dim}"
            )
        voices[str(name)] = Voice(str(name), emb)
    return voices
