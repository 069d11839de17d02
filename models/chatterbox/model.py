"""Chatterbox behind the engine's four-stage interface (models/base.py).

Tokens are rows of two ids (`row_width = 2`): the id, and its index within its kind — the
learned position T3 adds to a text or speech embedding, or the row of the conditioning
prefix. The engine's sampler draws column 0 from the speech head; `follow_row` writes the
speech position (the count of tokens generated so far, plus one: T3.inference's
`get_fixed_embedding(i + 1)`) on the host, so the step is synchronous.

One id space (column 0):
    [0, 704)              text tokens (T3's text_emb; start 255, stop 0)
    704 + s, s < 8194     speech token s (speech_emb; 6561 start, 6562 stop)
    8898 + v              conditioning of voice slot v (the prefix rows are precomputed per
                          voice: speaker, perceiver over its reference tokens)
    -1                    the prefix's last row, the emotion row: column 1 holds the
                          request's exaggeration as its float32 bit pattern, which embed
                          projects (T3's emotion_adv_fc) on the device, so each request has
                          its own exaggeration without a per-value bank
Each request's two classifier-free-guidance rows run as one sequence with stacked heads
(guided.py); candidates_with_options mixes them with each request's CFG weight, and the
engine's sampler applies the repetition penalty (over the start token and every generated
one, as T3.inference), temperature, min-p and top-p. Per-request options (family.py,
ChatterboxRequestOptions): exaggeration and cfg_weight, with ChatterboxTTS.generate's defaults.

Voices: each has a slot of one conditioning table (`_bank`), reserved at start-up for
MAX_VOICES so that it never moves (captured CUDA graphs of the decode step read it where it
is): the checkpoint's `default`, --voices-dir's (add_voice, before serving) and clients'
(add_clip_voice: encoded beside the loop, its rows written into a free slot on the loop's
thread through a PendingVoice; remove_clip_voice frees the slot).

S3Gen streams (s3gen_stream.py): a first chunk of audio once 20 speech tokens and the 3 of
the flow's look-ahead exist, then one a second; streamed audio is close to the whole decode,
not equal, since S3Gen's flow attends over its whole input (docs/models.md)."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.base import (
    BackboneShape,
    Candidates,
    ModelFacts,
    ModelInputError,
    Prompt,
    SpeechModel,
    StreamState,
)
from models.chatterbox.checkpoint import Chatterbox, Voice
from models.chatterbox.clip_voices import MAX_CLIP_S, S3GEN_CLIP_S, read_clips
from models.chatterbox.config import (
    SAMPLE_RATE,
    SAMPLING,
    SPEECH_CODES,
    T3_FACTS,
    TOKEN_RATE,
)
from models.chatterbox.family import ChatterboxRequestOptions
from models.chatterbox.guided import guided_forward
from models.chatterbox.s3gen_stream import S3GenStream, S3GenStreamer
from models.chatterbox.sampling import guided
from models.checkpoint_errors import CheckpointError
from models.codecs.flow_hift.lane import FlowHiftLane
from models.codecs.flow_hift.serving_options import STEADY_BATCH_ROWS
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer, FlowHiftStream
from models.device_util import upload
from models.layers.llama import fused_kernels_for
from models.voice_clip import VOICE_NAME, ClipRules, PendingVoice, VoiceClip, resample

log = logging.getLogger("voxgate.chatterbox")

DEFAULT_VOICE = "default"
MAX_TEXT_CHARS = 2000
# Conditioning slots, every voice's together (the default, --voices-dir's and clients'): the
# gateway keeps at most 1024 clients' voices (max_client_voices), each on every replica.
MAX_VOICES = 1280
# Clients' clips (POST /v1/voices): T3 takes the first 6 s, S3Gen the first 10 s and the voice
# encoder all of it, up to the speech tokenizer's 30 s; no transcript.
CLIENT_CLIP_RULES = ClipRules(min_s=2.0, max_s=MAX_CLIP_S, needs_transcript=False)


@dataclass(frozen=True)
class ChatterboxIds:
    text_vocab: int
    speech_vocab: int

    @property
    def speech_base(self) -> int:
        return self.text_vocab

    @property
    def cond_base(self) -> int:
        return self.text_vocab + self.speech_vocab

    @property
    def emotion(self) -> int:
        """The emotion row's id: below every other kind, so no voice slot can reach it."""
        return -1

    @property
    def stop(self) -> int:
        return self.speech_base + T3_FACTS.stop_speech

    def speech(self, code: int) -> int:
        return self.speech_base + code

    def code_of(self, token: int) -> int | None:
        code = token - self.speech_base
        return code if 0 <= code < SPEECH_CODES else None


@dataclass
class ChatterboxStream(StreamState):
    voice: Voice
    audio: S3GenStream
    dropped_tokens: int = 0  # generated tokens that were not speech codes (start, stop)


class ChatterboxModel(SpeechModel):
    def __init__(
        self, parts: Chatterbox, name: str = "chatterbox", constrain_codes: bool = True
    ) -> None:
        """`constrain_codes`: sample only the speech head's rows S3Gen decodes (its 6,561
        codes) and the stop row; False samples all 8,194 as the official T3.inference does,
        whose start row and 1,631 unused rows the detokenizer then drops (parity tests)."""
        self.parts = parts
        self.t3 = parts.t3
        sizes = self.t3.sizes
        self.ids = ChatterboxIds(sizes.text_vocab, sizes.speech_vocab)
        self.streamer = S3GenStreamer(parts.s3gen)
        # Random weights put a fifth of the head's mass on rows S3Gen cannot decode, so a
        # chunk of N tokens made ~0.8 N tokens of audio, short of what the engine counts on
        # (a first chunk's cover, a listener's pacing). A trained T3 puts ~none there.
        self.constrain_codes = constrain_codes
        self._kernels = None  # FlashInfer's fused kernels once use_fused_kernels() ran
        head_rows = sizes.speech_vocab
        undecodable = torch.ones(head_rows - SPEECH_CODES, dtype=torch.bool)
        undecodable[T3_FACTS.stop_speech - SPEECH_CODES] = False
        # Made here, not in the sampling path, which a CUDA graph may capture.
        self._undecodable_rows = undecodable.to(next(self.t3.parameters()).device)
        detok = self.streamer.detok
        self.voices: dict[str, Voice] = {DEFAULT_VOICE: parts.default_voice}  # listed
        self._slots: dict[str, int] = {}  # the listed voices' slots
        self._clip_voices: dict[str, tuple[Voice, int]] = {}  # clients' (voice, slot): unlisted
        self._free_slots: deque[int] = deque(range(MAX_VOICES))
        self._slots_lock = threading.Lock()  # clients' voices come and go on other threads
        rows = self._conditioning(parts.default_voice)
        self._cond_rows = rows.shape[0]
        # [MAX_VOICES, C, H]: each voice's conditioning rows; reserved once, never moved.
        self._bank = rows.new_zeros(MAX_VOICES, *rows.shape)
        self._put_named(DEFAULT_VOICE, rows)
        # The CUDA graphs cover the flow rows of the longest voice prompt S3Gen takes from a
        # clip (its first 10 s), so clients' voices, added while serving, replay graphs too
        # (a shorter prompt pads up to a captured bucket), and of each listed voice's.
        self._cover_prompt("clips", round(S3GEN_CLIP_S * TOKEN_RATE))
        self._cover_prompt(DEFAULT_VOICE, len(parts.default_voice.s3gen.prompt_tokens))
        self.facts = ModelFacts(
            name=name,
            sample_rate=SAMPLE_RATE,
            token_rate_hz=float(TOKEN_RATE),
            stop_token_ids=(self.ids.stop,),
            # A chunk's mel needs its tokens and the flow's 3 look-ahead tokens after it; the
            # first chunk is detok.first_hop tokens, the rest whole chunks (s3gen_stream.py).
            first_chunk_tokens=detok.first_hop + detok.lookahead,
            chunk_tokens=detok.chunk,
            frame_tokens=detok.chunk,
            lookahead_tokens=detok.lookahead,
            # HiFT emits a chunk's audio but for its right-context frames, which wait for the
            # next chunk (or the end).
            held_back_tokens=-(-detok.right // detok.ratio),
            voices=tuple(self.voices),
            default_voice=DEFAULT_VOICE,
            voice_cloning=parts.clip_encoders is not None,
            clip_rules=CLIENT_CLIP_RULES,
            max_context=self._cond_rows + sizes.text_positions + sizes.speech_positions,
            sampling_defaults={
                "temperature": SAMPLING.temperature,
                "top_p": SAMPLING.top_p,
                "top_k": 0,
                "min_p": SAMPLING.min_p,
                "repetition_penalty": SAMPLING.repetition_penalty,
            },
            row_width=2,
            # First chunks may be decoded by a twin detokenizer beside the steady job
            # (first_chunk_lane_codec). S3Gen streams on CosyVoice 2's grid (a 20-token first
            # chunk, 640 ms to play, then 25-token chunks), so it takes CosyVoice 2's measured
            # first-audio margin and steady batching (models/cosyvoice2/model.py says why).
            first_chunk_lane=True,
            first_audio_margin=2.0,
            steady_batch_rows=STEADY_BATCH_ROWS,
        )
        args = sizes.llama_args()
        self.shape = BackboneShape(
            num_layers=args.num_layers,
            hidden_size=2 * args.hidden_size,  # the two CFG rows side by side
            vocab_size=self.ids.cond_base,
            num_kv_heads=2 * args.num_kv_heads,
            head_dim=args.head_dim,
            num_q_heads=2 * args.num_heads,
            dtype=self.t3.speech_head.weight.dtype,
        )

    # voices ------------------------------------------------------------------------------------
    def _conditioning(self, voice: Voice) -> torch.Tensor:
        """A voice's conditioning rows [C, H] on the model's device. The last, the emotion
        row, stays unused: each request brings its own (embed)."""
        v = voice.t3
        w = self.t3.speech_head.weight
        with torch.inference_mode():
            return self.t3.conditioning(
                v.speaker.to(w.device, w.dtype), v.prompt_tokens.to(w.device), v.exaggeration
            )

    def _cover_prompt(self, voice: str, prompt_tokens: int) -> None:
        """The CUDA graphs (captured when the engine starts) cover a voice prompt of this
        many speech tokens, in whole flow chunks; past the most they cover, say so."""
        detok = self.streamer.detok
        if not detok.cover_prompt(math.ceil(prompt_tokens / detok.chunk)):
            log.warning(
                "voice %r: its S3Gen prompt of %d speech tokens is past the %d the CUDA graphs "
                "cover; its streams' codec jobs run eagerly, slow on a GPU: use a shorter clip",
                voice, prompt_tokens, detok.MAX_GRAPH_PROMPT_CHUNKS * detok.chunk,
            )  # fmt: skip

    def _take_slot(self) -> int:
        with self._slots_lock:
            if not self._free_slots:
                raise ModelInputError(
                    f"the model holds {MAX_VOICES} voices, its most: remove one first"
                )
            # The slot freed longest ago: a request admitted with a voice removed since still
            # reads that voice's rows at its prefill.
            return self._free_slots.popleft()

    def _write_slot(self, slot: int, rows: torch.Tensor) -> None:
        if rows.shape != self._bank.shape[1:]:
            raise ModelInputError(
                f"the voice's conditioning is {tuple(rows.shape)}, the table's "
                f"{tuple(self._bank.shape[1:])}"
            )
        with torch.no_grad():
            self._bank[slot].copy_(rows)

    def _put_named(self, name: str, rows: torch.Tensor) -> None:
        """A listed voice's rows in its slot (a voice added again under its name keeps it)."""
        slot = self._slots.get(name)
        if slot is None:
            slot = self._take_slot()
        self._write_slot(slot, rows)
        self._slots[name] = slot

    def add_voice(self, name: str, text: str, audio16k: np.ndarray, audio24k: np.ndarray) -> None:
        """A voice from a reference clip (at 16 kHz and 24 kHz), encoded once (clip_voices.py);
        requests with voice=name speak in it. `text`, the clip's transcript, is not needed by
        Chatterbox (CosyVoice 2's and CSM's add_voice take one; it may be empty). Listed in
        the facts: register these before serving."""
        voice = self._clip_encoders().voice(name, audio16k, audio24k)
        self._put_named(name, self._conditioning(voice))
        self._cover_prompt(name, len(voice.s3gen.prompt_tokens))
        self.voices[name] = voice
        clips = (*(v for v in self.facts.clip_voices if v != name), name)
        self.facts = dataclasses.replace(
            self.facts,
            voices=tuple(self.voices),
            clip_voices=clips,
        )

    def add_clip_voice(self, name: str, clip: VoiceClip) -> PendingVoice:
        """A client's voice (models/voice_clip.py), encoded as add_voice encodes a --voices-dir
        clip of the same audio, unlisted. The encoding runs here, beside the engine loop; the
        returned PendingVoice writes its rows into a free slot of the conditioning table, which
        the engine runs on the loop's thread between steps."""
        if not VOICE_NAME.match(name) or name in self.voices or name in self._clip_voices:
            raise ModelInputError(f"voice name {name!r} is taken or not a valid name")
        audio = np.array(clip.audio, dtype=np.float32)  # writable: Ray's arrays arrive read-only
        audio16k = resample(audio, clip.sample_rate, 16000)
        audio24k = resample(audio, clip.sample_rate, 24000)
        voice = self._clip_encoders().voice(name, audio16k, audio24k)
        rows = self._conditioning(voice)
        if rows.is_cuda:  # done before the loop's thread copies it, on a stream of its own
            torch.cuda.current_stream(rows.device).synchronize()
        t3, gen = voice.t3, voice.s3gen
        held = (rows, t3.speaker, t3.prompt_tokens, gen.prompt_tokens, gen.prompt_mel, gen.xvector)
        nbytes = sum(t.element_size() * t.numel() for t in held)

        def install() -> int:
            if name in self._clip_voices:
                raise ModelInputError(f"voice name {name!r} is taken")
            slot = self._take_slot()
            try:
                self._write_slot(slot, rows)
            except BaseException:
                with self._slots_lock:
                    self._free_slots.append(slot)
                raise
            self._clip_voices[name] = (voice, slot)
            return int(nbytes)

        return PendingVoice(name, install)

    def remove_clip_voice(self, name: str) -> None:
        entry = self._clip_voices.pop(name, None)
        if entry is not None:
            with self._slots_lock:
                self._free_slots.append(entry[1])

    def _clip_encoders(self):
        encoders = self.parts.clip_encoders
        if encoders is None:  # the facts say voice_cloning False: clients' clips stop earlier
            raise CheckpointError(
                "this Chatterbox checkpoint lacks the clip encoders (ve.safetensors, and the "
                "tokenizer.* and speaker_encoder.* tensors of s3gen.safetensors): it speaks "
                "with its conds.pt voice only"
            )
        return encoders

    def _voice(self, name: str) -> tuple[Voice, int]:
        """A voice by name → (voice, its slot); one lookup of a client's voice, which another
        thread may remove meanwhile."""
        listed = self.voices.get(name)
        if listed is not None:
            return listed, self._slots[name]
        entry = self._clip_voices.get(name)
        if entry is None:
            raise ModelInputError(
                f"unknown voice {name!r}; this model has: {', '.join(self.voices)}"
            )
        return entry

    def add_voices_dir(self, folder: str) -> None:
        """Every clip of a voices folder (`NAME.wav` ...) as the voice NAME."""
        for name, audio16k, audio24k in read_clips(folder):
            self.add_voice(name, "", audio16k, audio24k)

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        return self.preprocess_with_options(text, voice, {})

    def preprocess_with_options(
        self, text: str, voice: str | None, options: dict[str, float]
    ) -> Prompt:
        chosen = ChatterboxRequestOptions(**options)
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        chosen_voice, voice_slot = self._voice(voice or DEFAULT_VOICE)
        text_ids = self.parts.tokenizer.text_ids(text)
        if len(text_ids) > self.t3.sizes.text_positions:
            raise ModelInputError(
                f"text is {len(text_ids)} tokens; T3 takes at most {self.t3.sizes.text_positions}"
            )
        slot = self.ids.cond_base + voice_slot
        rows = [(slot, j) for j in range(self._cond_rows - 1)]
        rows.append((self.ids.emotion, float32_bits(chosen.exaggeration)))
        rows += [(t, i) for i, t in enumerate(text_ids)]
        start = self.ids.speech(T3_FACTS.start_speech)
        rows += [(start, 0), (start, 0)]  # T3.inference feeds the start token twice
        return Prompt(rows, extras={"voice": chosen_voice})

    # 2. forward ------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows [T, 2] → both CFG rows' embeddings [T, 2, H], with gathers and selects only
        (fixed shapes, no host synchronisation)."""
        t3, i = self.t3, self.ids
        kind, index = ids[:, 0], ids[:, 1]
        sizes = t3.sizes
        text_pos = t3.text_pos_emb.emb(index.clamp(0, sizes.text_positions - 1))
        text = t3.text_emb(kind.clamp(0, i.text_vocab - 1)) + text_pos
        speech = t3.speech_emb((kind - i.speech_base).clamp(0, sizes.speech_vocab - 1))
        speech = speech + t3.speech_pos_emb.emb(index.clamp(0, sizes.speech_positions - 1))
        slot = (kind - i.cond_base).clamp(0, self._bank.shape[0] - 1)
        cond = self._bank[slot, index.clamp(0, self._cond_rows - 1)]
        # The emotion row: column 1 read back as the float32 it carries (other rows' values
        # are discarded by the where below), cast as the package casts it.
        exaggeration = index.to(torch.int32).view(torch.float32).to(cond.dtype)
        emotion = t3.cond_enc.emotion_adv_fc(exaggeration[:, None])
        is_cond = (kind >= i.cond_base)[:, None]
        is_emotion = (kind == i.emotion)[:, None]
        is_text = ((kind >= 0) & (kind < i.text_vocab))[:, None]
        shared = torch.where(is_emotion, emotion, torch.where(is_cond, cond, speech))
        conditional = torch.where(is_text, text, shared)
        unconditional = torch.where(is_text, text_pos, shared)  # text tokens zeroed
        return torch.stack([conditional, unconditional], dim=1)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        hidden = guided_forward(self.t3, self.embed(input_ids), positions, attn, self._kernels)
        return hidden.flatten(1)  # [T, 2H]

    def use_fused_kernels(self) -> bool:
        """FlashInfer's fused norm/RoPE/activation kernels in T3's guided forward (guided.py),
        where they apply: a step of T3 at a few rows is mostly small element-wise kernels."""
        backbone = self.t3.backbone
        self._kernels = fused_kernels_for(
            backbone.args, backbone.rotary, self.t3.speech_head.weight
        )
        return self._kernels is not None

    def compute_logits(self, hidden: torch.Tensor, cfg_weight: Any = SAMPLING.cfg_weight):
        """The speech head's logits, the two CFG rows mixed [N, 8194] with `cfg_weight` (a
        number, or [N, 1] one per row)."""
        both = self.t3.speech_logits(hidden.view(hidden.shape[0], 2, -1))
        return guided(both[:, 0], both[:, 1], cfg_weight)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        defaults = [{}] * hidden.shape[0]
        return self.candidates_with_options(hidden, num_generated, allow_stop, defaults)

    def candidates_with_options(
        self,
        hidden: torch.Tensor,
        num_generated: list[int],
        allow_stop: list[bool],
        options: list[dict[str, float]],
    ) -> Candidates:
        """Each row's CFG rows mixed with its request's cfg_weight, in the logits' float32
        (T3.inference: `cond + cfg * (cond - uncond)`)."""
        weights = [ChatterboxRequestOptions(**o).cfg_weight for o in options]
        cfg = upload(weights, torch.float32, hidden.device)[:, None]
        logits = self.compute_logits(hidden, cfg)
        if self.constrain_codes:
            # the head's rows past the codes but the stop row: the start row, the unused ones
            logits[:, SPEECH_CODES:].masked_fill_(self._undecodable_rows, float("-inf"))
        blocked = ~upload(allow_stop, torch.bool, logits.device)
        logits[:, T3_FACTS.stop_speech].masked_fill_(blocked, float("-inf"))
        n, k = logits.shape
        ids = torch.arange(self.ids.speech_base, self.ids.speech_base + k, device=logits.device)
        return Candidates(logits, ids.expand(n, k))

    def prompt_graphs_sample_eagerly(self) -> bool:
        """T3's guided forward over a prompt is its decode forward over more rows (embed:
        gathers and selects from the fixed voice table, no host reads): prompts replay from
        the prompt graphs, and the CFG mix with each request's options samples after them."""
        return True

    def depth_stage(self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample) -> torch.Tensor:
        """No depth transformer: column 1 (the speech position) is written by follow_row."""
        return torch.stack([first_tokens, torch.zeros_like(first_tokens)], dim=1)

    def follow_row(self, prompt, output, token) -> tuple[int, int]:
        return (token[0], len(output) + 1)

    def is_stop(self, token) -> bool:
        return token[0] == self.ids.stop

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> ChatterboxStream:
        return self.stream_state_for({"voice": self.voices[DEFAULT_VOICE]})

    def stream_state_for(self, extras: dict[str, Any]) -> ChatterboxStream:
        voice: Voice = extras["voice"]
        return ChatterboxStream(voice, self.streamer.new_stream(voice.s3gen))

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list], final: list[bool]
    ) -> list[np.ndarray]:
        return self._detokenize(self.streamer.detok, states, new_tokens, final)

    def enable_cuda_graphs(self, graphs: Any) -> None:
        self.streamer.detok.enable_cuda_graphs(graphs)

    def first_chunk_lane_codec(self) -> FlowHiftLane:
        return FlowHiftLane(self.streamer.detok, self._detokenize, _flow_of)

    def _detokenize(
        self,
        detok: FlowHiftDetokenizer,
        states: list[StreamState],
        new_tokens: list[list],
        final: list[bool],
    ) -> list[np.ndarray]:
        """Each stream's new speech codes into one batched S3Gen streaming call on `detok`
        (the streamer's own, or the first-chunk lane's twin of it)."""
        streams, codes = [], []
        for state, tokens in zip(states, new_tokens, strict=True):
            assert isinstance(state, ChatterboxStream)
            # start/stop and the head's unused rows are dropped
            new = [c for c in (self.ids.code_of(t[0]) for t in tokens) if c is not None]
            state.dropped_tokens += len(tokens) - len(new)
            streams.append(state.audio)
            codes.append(new)
        return self.streamer.decode(streams, codes, final, detok)


def float32_bits(value: float) -> int:
    """`value` rounded to float32, as the integer of its bit pattern (what embed reads back)."""
    return int(np.array(value, dtype=np.float32).view(np.int32))


def _flow_of(state: StreamState) -> FlowHiftStream:
    assert isinstance(state, ChatterboxStream)
    return state.audio.flow
