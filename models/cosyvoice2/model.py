"""CosyVoice 2 through the four-stage interface: prompt → Qwen2 speech-token LM on paged KV →
flow-matching + HiFT audio, conditioned per request on its voice."""

from __future__ import annotations

import dataclasses
import logging
from functools import partial
from typing import Any

import numpy as np
import torch

from models.base import (
    BackboneShape,
    Candidates,
    ModelFacts,
    ModelInputError,
    Prompt,
    RepetitionAwareSampling,
    SpeechModel,
    StreamState,
)
from models.codecs.flow_hift.lane import FlowHiftLane
from models.codecs.flow_hift.serving_options import STEADY_BATCH_ROWS
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream
from models.cosyvoice2.config import CosyVoice2Config
from models.cosyvoice2.llm import SpeechLM
from models.cosyvoice2.voices import Voice, VoiceBank
from models.voice_clip import VOICE_NAME, ClipRules, VoiceClip, resample

log = logging.getLogger("voxgate.cosyvoice2")

MAX_TEXT_CHARS = 4000
# The published inference's length rule (`Qwen2LM.inference`'s min/max_token_text_ratio): a
# text of n tokens makes at least 2n speech tokens (its stop tokens held back until then) and
# at most 20n, which also ends a generation that runs away.
MIN_TOKEN_TEXT_RATIO = 2
MAX_TOKEN_TEXT_RATIO = 20


class CosyVoice2Stream(StreamState):
    def __init__(self, flow: FlowHiftStream, ids) -> None:
        self.flow = flow
        self.ids = ids
        self.dropped_tokens = 0  # generated tokens that were not speech codes


class CosyVoice2Model(SpeechModel):
    def __init__(
        self,
        cfg: CosyVoice2Config,
        llm: SpeechLM,
        tokenizer: Any,
        detok: FlowHiftDetokenizer,
        voices: VoiceBank,
        name: str = "cosyvoice2",
    ) -> None:
        self.cfg = cfg
        self.llm = llm
        self.tokenizer = tokenizer
        self.detok = detok
        self.voices = voices
        self.ids = llm.ids
        args = llm.qwen.args
        chunk, lookahead = detok.chunk, detok.lookahead
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=float(cfg.token_frame_rate),
            stop_token_ids=self.ids.stop_ids,
            # A chunk's mel needs its tokens and the 3 look-ahead tokens after it. The first
            # chunk is detok.first_hop tokens (docs/models.md: shorter than the flow's 25-token
            # chunk, for time to first audio), the rest are whole flow chunks.
            first_chunk_tokens=detok.first_hop + lookahead,
            chunk_tokens=chunk,
            frame_tokens=chunk,
            lookahead_tokens=lookahead,
            # HiFT emits a chunk's audio but for its right-context frames, which wait for the
            # next chunk (or the end).
            held_back_tokens=-(-detok.right // detok.ratio),
            voices=voices.names,
            default_voice=voices.default,
            voice_cloning=voices.encoder is not None,
            # The speech tokenizer takes 30 s; 12 s keeps the LLM's prompt short.
            clip_rules=ClipRules(min_s=2.0, max_s=12.0),
            max_context=args.max_positions,
            # ras_sampling's nucleus; CosyVoice applies no temperature and no penalty.
            sampling_defaults={
                "temperature": 1.0,
                "top_p": cfg.llm.top_p,
                "top_k": cfg.llm.top_k,
                "repetition_penalty": 1.0,
            },
            repetition_aware=RepetitionAwareSampling(cfg.llm.win_size, cfg.llm.tau_r),
            # First chunks may be decoded by a twin detokenizer beside the steady job
            # (first_chunk_lane_codec): streams are plain data either one continues.
            first_chunk_lane=True,
            # Its first chunk is 640 ms and the next grid point 1.62 s, so a margin that 640 ms
            # does not cover holds the first chunk until the first-audio budget. On the H200,
            # with first and urgent chunks on the lane, second chunks came at most 529 ms
            # after the first (p90 ~300 ms) at 4-7 req/s, and margin 2 played 234 streams
            # without a gap while 3 failed time to first audio at 4 req/s (docs/benchmark-history.md).
            first_audio_margin=2.0,
            steady_batch_rows=STEADY_BATCH_ROWS,  # serving_options.py says why
        )
        self.shape = BackboneShape.of(args, llm, self.ids.vocab_size)

    # voices ------------------------------------------------------------------------------------
    def add_voice(self, name: str, text: str, audio16k: np.ndarray, audio24k: np.ndarray) -> None:
        """A voice prompt: the reference clip (at 16 kHz and 24 kHz) and its transcript, encoded
        once; requests with voice=name continue its speech in its voice."""
        voice = self.voices.add_voice(name, self.text_ids(text), audio16k, audio24k)
        chunks = len(voice.flow_tokens) // self.detok.chunk
        if not self.detok.cover_prompt(chunks):  # its windows join the CUDA graphs' buckets
            log.warning(
                "voice %r: its prompt of %d chunks (%d speech tokens each, 25 a second) is past "
                "the %d the CUDA graphs cover; its streams' codec jobs run eagerly, slow on a "
                "GPU: use a shorter clip",
                name, chunks, self.detok.chunk, self.detok.MAX_GRAPH_PROMPT_CHUNKS,
            )  # fmt: skip
        self.facts = dataclasses.replace(
            self.facts,
            voices=self.voices.names,
            default_voice=self.voices.default,
            clip_voices=(*(v for v in self.facts.clip_voices if v != name), name),
        )

    def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """A client's voice (models/voice_clip.py), encoded as add_voice's, unlisted. Its
        flow prompt keeps the chunks the CUDA graphs captured at start-up cover (the clip's
        last seconds), so its streams replay graphs like every other voice's."""
        if not VOICE_NAME.match(name) or name in self.facts.voices:
            raise ModelInputError(f"voice name {name!r} is taken or not a valid name")
        if not clip.transcript.strip():
            raise ModelInputError(
                "CosyVoice 2 continues the clip's speech: send the clip's transcript"
            )
        covered = max((self.detok.GRAPH_PROMPT_CHUNKS, *self.detok.long_prompts))
        voice = self.voices.add_voice(
            name,
            self.text_ids(clip.transcript),
            resample(clip.audio, clip.sample_rate, 16000),
            resample(clip.audio, clip.sample_rate, 24000),
            client=True,
            max_chunks=covered,
        )
        return sum(t.numel() * t.element_size() for t in (voice.embedding, voice.mel)) + 8 * (
            len(voice.text_ids) + len(voice.llm_tokens) + len(voice.flow_tokens)
        )

    def remove_clip_voice(self, name: str) -> None:
        self.voices.remove_client_voice(name)

    def add_voices_dir(self, folder: str) -> None:
        """`NAME.wav` + `NAME.txt` pairs, as for CSM (models/csm/voices.py)."""
        from models.csm.voices import read_voices

        for clip16, clip24 in zip(
            read_voices(folder, 16000), read_voices(folder, 24000), strict=True
        ):
            self.add_voice(clip16.name, clip16.text, clip16.audio, clip24.audio)

    # 1. preprocess ---------------------------------------------------------------------------
    def text_ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """CosyVoice 2's layout: sos, prompt text + text, task_id, the prompt's speech tokens.
        The answer then continues the prompt's speech."""
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        v = self.voices.get(voice)
        ids = self.ids
        text_ids = self.text_ids(text)
        tokens = [ids.sos, *v.text_ids, *text_ids, ids.task_id]
        tokens += [ids.speech(s) for s in v.llm_tokens]
        length = (
            int(len(text_ids) * MIN_TOKEN_TEXT_RATIO),
            int(len(text_ids) * MAX_TOKEN_TEXT_RATIO),
        )
        return Prompt(tokens, extras={"voice": v}, length=length)

    # 2. forward ------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        return self.llm(input_ids, positions, attn)

    def use_fused_kernels(self) -> bool:
        """FlashInfer's fused norm/RoPE/activation kernels in the Qwen2 backbone, as the Llama
        families': a 0.5B model's step under load is mostly small element-wise kernels (9.5 ms
        at 32 rows on the H200 with the plain blocks, where its weights read in ~0.3 ms)."""
        return self.llm.qwen.use_fused_kernels()

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the speech head's rows (the only tokens CosyVoice 2 generates)."""
        return self.llm.speech_logits(hidden)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        return self.device_candidates_of(hidden, num_generated, allow_stop)

    def device_candidates(
        self, hidden: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor
    ) -> Candidates:
        """The speech head's logits [N, S + 3], the stop columns masked (a device mask and
        masked_fill_, never indexing with host lists: no upload from pageable memory, no
        wait) in rows not yet allowed to stop."""
        logits = self.llm.speech_logits(hidden)
        n, k = logits.shape
        logits[:, self.ids.speech_token_size :].masked_fill_(~allow_stop[:, None], float("-inf"))
        ids = torch.arange(self.ids.speech_base, self.ids.speech_base + k, device=logits.device)
        return Candidates(logits, ids.expand(n, k))

    def enable_cuda_graphs(self, graphs: Any) -> None:
        self.detok.enable_cuda_graphs(graphs)

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> CosyVoice2Stream:
        return self.stream_state_for({"voice": self.voices.get(None)})

    def stream_state_for(self, extras: dict[str, Any]) -> CosyVoice2Stream:
        v: Voice = extras["voice"]
        return CosyVoice2Stream(self.detok.new_stream(v.flow_tokens, v.mel, v.embedding), self.ids)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[int]], final: list[bool]
    ) -> list[np.ndarray]:
        return _decode(self.detok, states, new_tokens, final, self.ids)

    def first_chunk_lane_codec(self) -> FlowHiftLane:
        return FlowHiftLane(self.detok, partial(_decode, ids=self.ids), _flow_of)


def _decode(
    detok: FlowHiftDetokenizer,
    states: list[StreamState],
    new_tokens: list[list[int]],
    final: list[bool],
    ids,
) -> list[np.ndarray]:
    """Speech tokens → codes pushed into each stream, then one batched flow + HiFT call."""
    flows = []
    for state, toks in zip(states, new_tokens, strict=True):
        assert isinstance(state, CosyVoice2Stream)
        codes = [c for c in map(ids.code_of, toks) if c is not None]
        state.dropped_tokens += len(toks) - len(codes)
        detok.push(state.flow, codes)
        flows.append(state.flow)
    return detok.decode(flows, final)


def _flow_of(state: StreamState) -> FlowHiftStream:
    assert isinstance(state, CosyVoice2Stream)
    return state.flow
