"""Qwen3-TTS through the four-stage interface: prompt rows → talker on paged KV → codebook 0
from the engine's sampler → code predictor for codebooks 1..15 → streaming 12 Hz decoder."""

from __future__ import annotations

from dataclasses import dataclass, field
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
from models.checkpoint_errors import CheckpointError
from models.qwen3_tts import prompt as P
from models.qwen3_tts.codec import DecoderStream, SpeechDecoder
from models.qwen3_tts.family import read_request_options
from models.qwen3_tts.predictor import CodePredictor
from models.qwen3_tts.talker import Talker

MAX_TEXT_CHARS = 4000
MAX_INSTRUCTION_CHARS = 1000
FIRST_CHUNK_FRAMES = 2  # 160 ms of audio before the first chunk decodes
CHUNK_FRAMES = 4
MIN_FRAMES = 2  # the shortest utterance the published generate makes


@dataclass
class Qwen3TtsStream(StreamState):
    decoder: DecoderStream = field(default_factory=DecoderStream)


class Qwen3TtsModel(SpeechModel):
    def __init__(
        self,
        talker: Talker,
        predictor: CodePredictor,
        decoder: SpeechDecoder,
        encode: P.Encode,
        ids: P.CodecIds,
        takes_instruction: bool,
        name: str = "qwen3-tts",
        sample_rate: int = 24000,
    ) -> None:
        self.talker, self.predictor, self.decoder = talker, predictor, decoder
        self.encode = encode
        self.ids = ids
        self.takes_instruction = takes_instruction
        self.k = talker.num_codebooks
        self.code_vocab = predictor.vocab
        if decoder.cfg.num_quantizers != self.k or decoder.cfg.codebook_size != self.code_vocab:
            raise CheckpointError(
                f"the speech tokenizer decodes {decoder.cfg.num_quantizers} codebooks of "
                f"{decoder.cfg.codebook_size} but the talker emits {self.k} of {self.code_vocab}: "
                "speech_tokenizer/config.json does not belong to this model"
            )
        # Codebook 0 may be any code or the end of speech (the published generate suppresses
        # the rest of the codec vocabulary: control ids, speakers, languages).
        self._candidates = torch.tensor([*range(self.code_vocab), ids.eos], dtype=torch.long)
        speakers = tuple(sorted(ids.speakers))
        self.facts = ModelFacts(
            name=name,
            sample_rate=sample_rate,
            token_rate_hz=sample_rate / decoder.cfg.samples_per_frame,
            n_codebooks=self.k,
            stop_token_ids=(),  # a stop is a frame whose codebook 0 is the end code (is_stop)
            first_chunk_tokens=FIRST_CHUNK_FRAMES,
            chunk_tokens=CHUNK_FRAMES,
            voices=speakers,
            default_voice=speakers[0] if speakers else None,
            max_context=talker.args.max_positions,
            # generation_config.json of the published checkpoints (talker and sub-talker alike).
            sampling_defaults={
                "temperature": 0.9,
                "top_k": 50,
                "top_p": 1.0,
                "repetition_penalty": 1.05,
            },
            row_width=self.k + 1,
        )
        self.shape = BackboneShape.of(talker.args, talker)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        return self.preprocess_with_options(text, voice, {})

    def preprocess_with_options(self, text: str, voice: str | None, options: dict) -> Prompt:
        """`voice` is a preset speaker (CustomVoice; VoiceDesign models have none); `options`
        may hold `language` ("auto" or one of the checkpoint's) and `instruction` (CustomVoice
        1.7B: how to speak, emotion, pace…; VoiceDesign: the description of the voice)."""
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        speaker: str | None = (voice or self.facts.default_voice or "").lower()
        if not self.ids.speakers:  # VoiceDesign: the instruction describes the voice
            if voice:
                raise ModelInputError(
                    f"{self.facts.name} designs its voice from the instruction and has no "
                    f"preset speakers; leave out voice {voice!r}"
                )
            speaker = None
        elif speaker not in self.ids.speakers:
            raise ModelInputError(
                f"unknown voice {voice!r}; choose one of {', '.join(self.facts.voices)}"
            )
        chosen = read_request_options(options)
        instruction = chosen.instruction.strip()
        if instruction and not self.takes_instruction:
            raise ModelInputError(
                f"{self.facts.name} takes no instruction (the 0.6B CustomVoice model has no "
                "instruction control); leave it out or serve a 1.7B model"
            )
        if len(instruction) > MAX_INSTRUCTION_CHARS:
            raise ModelInputError(
                f"the instruction is limited to {MAX_INSTRUCTION_CHARS} characters"
            )
        request = P.PromptRequest(text, speaker, chosen.language or "auto", instruction)
        return Prompt(P.prompt_rows(self.encode, self.ids, request, self.k))

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.talker(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.talker.compute_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        """Codebook 0's logits over the 2048 codes and the end code (the last column), which
        the first MIN_FRAMES frames may not take (the package's generate: min_new_tokens)."""
        columns = self._candidates.to(hidden.device)
        logits = self.compute_logits(hidden)[:, columns]
        allow = [ok and n >= MIN_FRAMES for ok, n in zip(allow_stop, num_generated, strict=True)]
        stop = [len(self._candidates) - 1]
        return Candidates(block_stops(logits, allow, stop), columns[None].expand_as(logits))

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        codes = self.predictor.generate(hidden, first_tokens, sample)  # [N, K]
        text = torch.full_like(codes[:, :1], self.ids.tts_pad)
        return torch.cat([codes, text], dim=1)

    def is_stop(self, token: Token) -> bool:
        return isinstance(token, tuple) and token[0] == self.ids.eos

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> Qwen3TtsStream:
        return Qwen3TtsStream()

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Streams that bring the same number of frames decode together, in one batch."""
        device = next(self.decoder.parameters()).device
        out = [np.zeros(0, dtype=np.float32) for _ in states]
        groups: dict[int, list[tuple[int, list]]] = {}
        for i, rows in enumerate(new_tokens):
            frames = [row[: self.k] for row in rows if not self.is_stop(row)]
            if frames:
                groups.setdefault(len(frames), []).append((i, frames))
        for members in groups.values():
            codes = torch.tensor([f for _, f in members], dtype=torch.long, device=device)
            streams = [states[i].decoder for i, _ in members]  # type: ignore[attr-defined]
            audio = self.decoder.decode_batch(codes.transpose(1, 2), streams).float().cpu()
            for (i, _), pcm in zip(members, audio.numpy(), strict=True):
                out[i] = pcm
        return out

    def release(self) -> None:
        for module in (self.talker, self.predictor, self.decoder):
            module.to("cpu")
