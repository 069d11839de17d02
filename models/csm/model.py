"""CSM through the four-stage interface: prompt rows → backbone on paged KV → codebook 0 from the
engine's sampler → depth decoder for codebooks 1..31 → streaming Mimi audio."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from models.base import (
    BackboneShape,
    Candidates,
    CodeSampler,
    ModelFacts,
    ModelInputError,
    Prompt,
    SpeechModel,
    StreamState,
    Token,
    block_stops,
)
from models.codecs.mimi import MimiDetokenizer, MimiStream
from models.csm import prompt as P
from models.csm.backbone import CsmBackbone
from models.csm.depth import CsmDepthDecoder
from models.voice_clip import VOICE_NAME, VoiceClip, resample

SPEAKERS = ("0", "1")  # the conversational speaker ids Sesame's examples use
MAX_TEXT_CHARS = 4000


@dataclass
class CsmStream(StreamState):
    mimi: MimiStream
    dropped_frames: int = 0  # frames with a code the codec cannot decode (unconstrained sampling)


class CsmModel(SpeechModel):
    def __init__(
        self,
        backbone: CsmBackbone,
        depth: CsmDepthDecoder,
        tokenizer: Any,  # tokenizers.Tokenizer
        detok: MimiDetokenizer,
        eos_code: int = 0,
        name: str = "csm",
        constrain_codes: bool = True,
    ) -> None:
        self.backbone = backbone
        self.depth = depth
        self.tokenizer = tokenizer
        self.detok = detok
        self.num_codebooks = backbone.num_codebooks
        if detok.num_codebooks != self.num_codebooks:
            raise ModelInputError(
                f"the codec decodes {detok.num_codebooks} codebooks but the model emits "
                f"{self.num_codebooks}; config.json's codec_config does not match the model"
            )
        self.eos_code = eos_code
        # Each codebook's vocabulary has 3 ids beyond the codec's codes (2051 vs 2048); a
        # trained model should never pick them, and restricting sampling to the codes makes
        # sure every frame decodes. False samples the whole vocabulary, as transformers does.
        self.code_limit = detok.codebook_size if constrain_codes else self.depth.vocab
        self._voices: dict[str, P.VoicePrompt] = {}  # --voices-dir's, listed in facts.voices
        self._clip_voices: dict[str, P.VoicePrompt] = {}  # clients' (add_clip_voice), unlisted
        args = backbone.args
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=detok.frame_rate,
            stop_token_ids=(),  # a stop is a frame (is_stop), not one id
            first_chunk_tokens=detok.first_chunk,
            chunk_tokens=detok.chunk,
            voices=SPEAKERS,
            default_voice=SPEAKERS[0],
            voice_cloning=True,
            max_context=args.max_positions,
            # Sesame's generator defaults (temperature 0.9, top-k 50); no repetition penalty.
            sampling_defaults={
                "temperature": 0.9,
                "top_k": 50,
                "top_p": 1.0,
                "repetition_penalty": 1.0,
            },
            row_width=self.num_codebooks + 1,
        )
        self.shape = BackboneShape.of(args, backbone, depth.vocab)

    # --- voices ----------------------------------------------------------------------------------
    def add_voice(self, name: str, text: str, audio: np.ndarray, speaker: int = 0) -> None:
        """Register a voice prompt: a context turn of `speaker` saying `text` in `audio`
        (float32 mono at facts.sample_rate). Its Mimi codes are computed once, here, and every
        request with `voice=name` reuses them. Register voices before an engine serves this
        model: its clients read the model's facts (the voice list) once, at start."""
        if not VOICE_NAME.match(name) or name in SPEAKERS:
            raise ModelInputError(
                f"voice name {name!r} must start with a letter and use letters, digits, '_', '.' "
                f"or '-' (at most 64), and must not be a speaker id ({', '.join(SPEAKERS)})"
            )
        if speaker < 0 or not text.strip():
            raise ModelInputError(f"voice {name!r} needs a transcript and a speaker id >= 0")
        codes = self.detok.encode(audio)
        self._voices[name] = P.VoicePrompt(speaker, text.strip(), codes)
        clip_voices = tuple(sorted(self._voices))
        self.facts = replace(self.facts, voices=SPEAKERS + clip_voices, clip_voices=clip_voices)

    def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """A client's voice: the clip as a context turn of speaker 0, its Mimi codes computed
        once (the same prompt as a --voices-dir voice), not listed in facts.voices."""
        if not VOICE_NAME.match(name) or name in SPEAKERS or name in self._voices:
            raise ModelInputError(f"voice name {name!r} is taken or not a valid name")
        if not clip.transcript.strip():
            raise ModelInputError("CSM continues the clip's speech: send the clip's transcript")
        codes = self.detok.encode(resample(clip.audio, clip.sample_rate, self.detok.sample_rate))
        self._clip_voices[name] = P.VoicePrompt(0, clip.transcript.strip(), codes)
        return int(codes.nbytes) + len(clip.transcript.encode())

    def remove_clip_voice(self, name: str) -> None:
        self._clip_voices.pop(name, None)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """`voice` is a speaker id ("0", "1") or the name of a registered voice prompt, whose
        context turn (transcript + reference audio codes) precedes the text."""
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        voice = voice or self.facts.default_voice
        # One lookup each: a client's voice may be removed from another thread meanwhile.
        prompt = self._voices.get(voice) or self._clip_voices.get(voice)
        if voice in SPEAKERS:
            speaker, context = int(voice), []
        elif prompt is not None:
            speaker, context = prompt.speaker, [prompt]
        else:
            raise ModelInputError(
                f"unknown voice {voice!r}; choose one of {', '.join(self.facts.voices)}"
            )
        rows = P.prompt_rows(
            self.tokenizer, speaker, text, context, self.num_codebooks, self.eos_code
        )
        return Prompt(rows)

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.backbone(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.backbone.compute_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        """Codebook 0's logits over the codec's codes. Before min_tokens codebook 0 may not be
        the end-of-audio code, so no frame can be the end frame (as a stop token is masked)."""
        logits = self.compute_logits(hidden)[:, : self.code_limit]
        return Candidates(block_stops(logits, allow_stop, [self.eos_code]), None)

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        codes = self.depth.generate(hidden, first_tokens, sample, self.code_limit)  # [N, K]
        text = torch.full_like(codes[:, :1], P.ABSENT)
        return torch.cat([codes, text], dim=1)

    def is_stop(self, token: Token) -> bool:
        """transformers' CSM rule: a frame whose codebooks, all but the last, are the EOS code."""
        return all(c == self.eos_code for c in token[: self.num_codebooks - 1])

    # 4. postprocess --------------------------------------------------------------------------
    def warm_up_batches(self, max_batch: int) -> None:
        # A call carries a first chunk, a steady chunk, or a final flush of fewer frames.
        most = max(self.detok.first_chunk, self.detok.chunk)
        self.detok.warm_up_batches(max_batch, frames=tuple(range(1, most + 1)))

    def new_stream_state(self) -> CsmStream:
        return CsmStream(mimi=self.detok.new_stream())

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        k, limit = self.num_codebooks, self.detok.codebook_size
        for state, rows in zip(states, new_tokens, strict=True):
            assert isinstance(state, CsmStream)
            frames = []
            for row in rows:
                if self.is_stop(row):
                    continue  # the end frame is a marker, not audio
                codes = list(row[:k])
                if max(codes) >= limit:
                    state.dropped_frames += 1
                    continue
                frames.append(codes)
            self.detok.push(state.mimi, frames)
        return self.detok.decode([s.mimi for s in states])  # type: ignore[attr-defined]
