"""Qwen3-TTS through the four-stage interface: prompt rows → talker on paged KV → codebook 0
from the engine's sampler → code predictor for codebooks 1..15 → streaming 12 Hz decoder."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
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
from models.qwen3_tts.clip_encoder import ClipEncoder
from models.qwen3_tts.codec import SpeechDecoder
from models.qwen3_tts.codec_streams import CodecStream, CodecStreams
from models.qwen3_tts.family import (
    MAX_INSTRUCTION_CHARS,
    checkpoint_options,
    read_request_options,
)
from models.qwen3_tts.lane import Qwen3TtsLane
from models.qwen3_tts.predictor import CodePredictor
from models.qwen3_tts.speaker_encoder import SpeakerEncoder, log_mel
from models.qwen3_tts.streamed_text import StreamedText
from models.qwen3_tts.talker import Talker
from models.text_feed import TextFeed
from models.voice_clip import VOICE_NAME, ClipRules, VoiceClip, resample

MAX_TEXT_CHARS = 4000
FIRST_CHUNK_FRAMES = 2  # 160 ms of audio before the first chunk decodes
CHUNK_FRAMES = 4
# The engine's first-audio margin (ModelFacts.first_audio_margin): a first chunk holds 2x the
# next chunk's wait, not the engine's 3x. A frame is 80 ms of audio and on an H100 a stream
# made one every ~20 ms at 10 req/s, so the next 4-frame chunk comes ~100 ms after the first:
# with 3x the first chunks waited 48 ms at the median for 4-5 frames (first audio 116 ms at
# the median), and at 20 req/s for 8 (held 200 ms; p90 TTFA 590 ms failed). Replayed on those
# runs' request traces (each token and codec job at its measured time,
# bench/results/2026-12-06-nvidia-h100-qwen3-tts-1.7b-s50-*), first chunks of 3 frames at
# 10 req/s and 4 at 20 left no stream short of audio, 2 frames did at 20 req/s; 2x gives 3 and
# ~5 there. Served on one H100 at 20 req/s, 2x passed three runs (p90 TTFA 309-350 ms) where
# 3x failed two (549, 565 ms): BENCHMARKS.md, "New families on an H100".
FIRST_AUDIO_MARGIN = 2.0
MIN_FRAMES = 2  # the shortest utterance the published generate makes
# A cloned voice's clip is in every prompt of that voice and decoded before its audio.
MAX_CLIP_SECONDS = 30
# Clients' clips (add_clip_voice): shorter, since each of their requests prefills and decodes
# the clip's codes again; 3-10 s of clean speech clone best.
CLIENT_CLIP_RULES = ClipRules(min_s=2.0, max_s=15.0, needs_transcript=False)
# Cloned voices a Base model holds at once, --voices-dir's and clients' together (the
# gateway's max_client_voices is 1024 by default): their x-vectors' table, reserved at start.
MAX_CLONED_VOICES = 1280


@dataclass(frozen=True)
class ClonedVoice:
    row: int  # the speaker row's code_0, which embeds as the clip's x-vector
    reference: P.Reference | None  # the clip's transcript and codes (in-context cloning)


@dataclass
class Qwen3TtsStream(StreamState):
    decoder: CodecStream = field(default_factory=CodecStream)


class Qwen3TtsModel(SpeechModel):
    def __init__(
        self,
        talker: Talker,
        predictor: CodePredictor,
        decoder: SpeechDecoder,
        encode: P.Encode,
        ids: P.CodecIds,
        no_instruction: str | None,
        name: str = "qwen3-tts",
        sample_rate: int = 24000,
        speaker_encoder: SpeakerEncoder | None = None,
        clip_encoder: ClipEncoder | None = None,
    ) -> None:
        """`no_instruction`: why this checkpoint takes no instruction (None: it takes one).
        `speaker_encoder`, `clip_encoder`: the Base models', which clone voices from clips
        (add_voice)."""
        self.talker, self.predictor, self.decoder = talker, predictor, decoder
        self.codec = CodecStreams(decoder)  # the decoder's streams, batched (graphs on a GPU)
        self.encode = encode
        self.ids = ids
        self.no_instruction = no_instruction
        self.speaker_encoder = speaker_encoder
        self.clip_encoder = clip_encoder
        self._clones: dict[str, ClonedVoice] = {}  # --voices-dir's, listed in facts.voices
        self._client_clones: dict[str, ClonedVoice] = {}  # clients' (add_clip_voice), unlisted
        if speaker_encoder is not None:
            talker.reserve_voices(MAX_CLONED_VOICES)
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
            stop_token_ids=(),  # a stop is a frame whose codebook 0 is the end code (is_stop)
            first_chunk_tokens=FIRST_CHUNK_FRAMES,
            chunk_tokens=CHUNK_FRAMES,
            first_audio_margin=FIRST_AUDIO_MARGIN,
            # On CUDA first chunks decode on a lane of their own (first_chunk_lane_codec);
            # `--no-first-chunk-lane` turns it off (Qwen3TtsLoadOptions).
            first_chunk_lane=True,
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
            # Base models only: CustomVoice and VoiceDesign have no speaker encoder.
            voice_cloning=speaker_encoder is not None,
            clip_rules=CLIENT_CLIP_RULES,
            request_options=checkpoint_options(
                ids.spoken_languages(),
                no_instruction,
                designs_voice=not ids.speakers and speaker_encoder is None,
            ),
            # Streamed text (the package's streaming-text layout), every variant: preset,
            # designed, and cloned voices (x-vector only, or in context with the clip's codes).
            appends_text=True,
        )
        self.shape = BackboneShape.of(talker.args, talker)

    # --- voices ----------------------------------------------------------------------------------
    def add_voice(self, name: str, audio: np.ndarray, text: str = "") -> None:
        """Clone a voice from a clip (float32 mono at facts.sample_rate) and what it says: the
        speaker encoder's x-vector of it takes the speaker row, and with `text` the prompt
        also holds the transcript and the clip's codes, which the model continues (the
        package's icl_mode; without text, its x_vector_only_mode). Base models only; register
        voices before serving."""
        if not name or name in self._clones:
            raise ModelInputError(f"voice name {name!r} is empty or taken")
        seconds = len(audio) / self.facts.sample_rate
        if not 0.5 <= seconds <= MAX_CLIP_SECONDS:
            raise ModelInputError(
                f"voice {name!r}: the clip lasts {seconds:.1f} s; give 0.5 to "
                f"{MAX_CLIP_SECONDS} s (3 to 10 s of clean speech clone best)"
            )
        self._clones[name] = self._clone(audio, text)
        clones = tuple(sorted(self._clones))
        self.facts = replace(self.facts, voices=clones, clip_voices=clones, default_voice=clones[0])

    def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """A client's voice (models/voice_clip.py): the clip at the model's rate, cloned as
        add_voice clones a --voices-dir clip (in-context with a transcript, else by its
        x-vector alone), not listed in facts.voices. Holds its x-vector's slot, and its codes
        and transcript ids with a transcript."""
        if not VOICE_NAME.match(name) or name in self._clones or name in self._client_clones:
            raise ModelInputError(f"voice name {name!r} is taken or not a valid name")
        audio = resample(clip.audio, clip.sample_rate, self.facts.sample_rate)
        voice = self._clone(audio, clip.transcript)
        self._client_clones[name] = voice
        nbytes = self.talker.voices[0].nbytes
        if voice.reference is not None:
            nbytes += voice.reference.codes.nbytes + 8 * len(voice.reference.text_ids)
        return int(nbytes)

    def remove_clip_voice(self, name: str) -> None:
        voice = self._client_clones.pop(name, None)
        if voice is not None:
            self.talker.remove_voice(voice.row)

    def _clone(self, audio: np.ndarray, text: str) -> ClonedVoice:
        """A clip (float32 mono at facts.sample_rate) and what it says → its x-vector in a slot
        of the talker's table and, with `text`, the reference for in-context cloning."""
        if self.speaker_encoder is None:
            raise ModelInputError(
                f"{self.facts.name} has no speaker encoder: voices from clips need a Base model"
            )
        encoder = self.speaker_encoder
        weight = next(encoder.parameters())
        with torch.inference_mode():
            xvector = encoder(log_mel(audio)[None].to(weight.device, weight.dtype))[0]
        reference = None
        if text.strip() and self.clip_encoder is not None:
            ids = self.encode(f"<|im_start|>assistant\n{text.strip()}<|im_end|>\n")[3:-2]
            reference = P.Reference(ids, self.clip_encoder.encode(audio))
        return ClonedVoice(self.talker.add_voice(xvector), reference)

    def _speaker(self, voice: str | None) -> tuple[str | None, ClonedVoice | None]:
        """The request's voice → (preset speaker, None) or (None, a cloned voice), or
        (None, None) for a VoiceDesign model."""
        if self.speaker_encoder is not None:
            name = voice or self.facts.default_voice
            # One lookup each: a client's voice may be removed from another thread meanwhile.
            clone = self._clones.get(name or "") or self._client_clones.get(name or "")
            if clone is None:
                if voice is None:
                    raise ModelInputError(
                        f"{self.facts.name} clones voices from clips and has none: start it "
                        "with --voices-dir (a clip and its transcript per voice), or add one "
                        "from a clip (POST /v1/voices) and name it"
                    )
                raise ModelInputError(
                    f"unknown voice {voice!r}; choose one of "
                    f"{', '.join(self.facts.voices) or '(none)'}"
                )
            return None, clone
        if not self.ids.speakers:  # VoiceDesign: the instruction describes the voice
            if voice:
                raise ModelInputError(
                    f"{self.facts.name} designs its voice from the instruction and has no "
                    f"preset speakers; leave out voice {voice!r}"
                )
            return None, None
        speaker = (voice or self.facts.default_voice or "").lower()
        if speaker not in self.ids.speakers:
            raise ModelInputError(
                f"unknown voice {voice!r}; choose one of {', '.join(self.facts.voices)}"
            )
        return speaker, None

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        return self.preprocess_with_options(text, voice, {})

    def preprocess_with_options(self, text: str, voice: str | None, options: dict) -> Prompt:
        """`voice` is a preset speaker (CustomVoice), a cloned voice (Base), or None (VoiceDesign,
        or the default); `options` may hold `language` ("auto" or one of the checkpoint's) and
        `instruction` (CustomVoice 1.7B: how to speak, emotion, pace…; VoiceDesign: the
        description of the voice)."""
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        request = self._prompt_request(text, voice, options)
        rows = P.prompt_rows(self.encode, self.ids, request, self.k)
        extras = {} if request.reference is None else {"reference_codes": request.reference.codes}
        return Prompt(rows, extras)

    def preprocess_text_stream(self, text: str, voice: str | None, options: dict) -> Prompt:
        """A request whose text is still arriving, opened with its start (at least one whole
        word: text up to a space), in the package's streaming-text layout: every text id
        past the prompt is fed with a generated frame (extend_request). A voice cloned in
        context lines the text up with the clip's frames in the prompt: the request starts
        once its text reaches past the clip (or is final), as the package's prompt needs."""
        request = self._prompt_request(text, voice, options)
        streamed = StreamedText(self.encode, MAX_TEXT_CHARS)
        first = streamed.add(text, final=False)
        if not first:
            raise ModelInputError(
                "streamed text opens with at least one whole word (text up to a space); "
                "send the rest as it comes"
            )
        prompt = P.streaming_prompt(self.encode, self.ids, request, self.k, first)
        feed = TextFeed(
            column=self.k,
            filler=self.ids.tts_pad,
            pending=deque(prompt.trailing),
            prompt_gaps=deque(prompt.gaps),
        )
        extras: dict[str, Any] = {"streamed_text": streamed}
        if request.reference is not None:
            extras["reference_codes"] = request.reference.codes
        return Prompt(prompt.rows, extras, text_feed=feed)

    def extend_request(self, extras: dict[str, Any], text: str, final: bool) -> list[int]:
        streamed = extras.get("streamed_text")
        if not isinstance(streamed, StreamedText):
            raise ModelInputError("this request was not opened for streamed text")
        ids = streamed.add(text, final)
        if final:
            if not streamed.ids:
                raise ModelInputError("text is empty: give the model something to say")
            ids = [*ids, self.ids.tts_eos]
        return ids

    def _prompt_request(self, text: str, voice: str | None, options: dict) -> P.PromptRequest:
        speaker, clone = self._speaker(voice)
        chosen = read_request_options(options)
        instruction = chosen.instruction.strip()
        if instruction and self.no_instruction:
            raise ModelInputError(
                f"{self.facts.name} takes no instruction ({self.no_instruction}); leave it out"
            )
        if len(instruction) > MAX_INSTRUCTION_CHARS:
            raise ModelInputError(
                f"the instruction is limited to {MAX_INSTRUCTION_CHARS} characters"
            )
        return P.PromptRequest(
            text,
            speaker,
            chosen.language or "auto",
            instruction,
            None if clone is None else clone.row,
            None if clone is None else clone.reference,
        )

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.talker(input_ids, positions, attn)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.talker.compute_logits(hidden)

    def use_fused_kernels(self) -> bool:
        """FlashInfer's fused kernels in the talker's layers and the depth stage's (a step is
        bound by its count of small kernels, most of them the depth stage's: docs/models.md)."""
        talker = self.talker.use_fused_kernels()
        predictor = self.predictor.use_fused_kernels()
        return talker and predictor

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        """Codebook 0's logits over the 2048 codes and the end code (the last column), which
        the first MIN_FRAMES frames may not take (the package's generate: min_new_tokens)."""
        columns = self._candidates_on(hidden.device)
        logits = self.compute_logits(hidden)[:, columns]
        allow = [ok and n >= MIN_FRAMES for ok, n in zip(allow_stop, num_generated, strict=True)]
        stop = [len(self._candidates) - 1]
        return Candidates(block_stops(logits, allow, stop), columns[None].expand_as(logits))

    def _candidates_on(self, device: torch.device) -> torch.Tensor:
        """Codebook 0's candidate ids on `device`, copied there once: a copy from pageable host
        memory every step would wait for the device to finish the step's forward first."""
        if self._candidates.device != device:
            self._candidates = self._candidates.to(device)
        return self._candidates

    def prompt_graphs_sample_eagerly(self) -> bool:
        """The talker's forward over a prompt is its decode forward over more rows: prompts
        replay from the prompt graphs, codebook 0 and the depth stage sample after them."""
        return True

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

    def stream_state_for(self, extras: dict[str, Any]) -> StreamState:
        """With in-context cloning the generated frames continue the clip's: the decoder
        first reads the clip's codes (their audio is dropped, as the package cuts it off), so
        the audio equals the package's decode of clip + speech. It reads them with the
        stream's first job, on the codec's thread."""
        codes = extras.get("reference_codes")
        prime = None if codes is None else np.asarray(codes, dtype=np.int64)
        return Qwen3TtsStream(decoder=self.codec.new_stream(prime))

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Streams that bring the same number of frames decode together (CodecStreams)."""
        return self._decode_on(self.codec, states, new_tokens)

    def _decode_on(
        self, codec: CodecStreams, states: list[StreamState], new_tokens: list[list[Token]]
    ) -> list[np.ndarray]:
        """detokenize on one of the decoder's contexts: the model's, or its lane's."""
        frames = [
            [list(row[: self.k]) for row in rows if not self.is_stop(row)] for rows in new_tokens
        ]
        streams = [state.decoder for state in states]  # type: ignore[attr-defined]
        return codec.decode(streams, frames)

    def first_chunk_lane_codec(self) -> Qwen3TtsLane:
        """The decoder's second context, for the engine's first-chunk lane (on CUDA)."""
        return Qwen3TtsLane(self.codec, self._decode_on)

    def enable_cuda_graphs(self, graphs: Any) -> None:
        """The decoder's calls replay from CUDA graphs (CodecStreams.enable_cuda_graphs):
        eagerly, a call launches ~1,200 small kernels."""
        self.codec.enable_cuda_graphs(graphs)

    def release(self) -> None:
        for module in (self.talker, self.predictor, self.decoder):
            module.to("cpu")
