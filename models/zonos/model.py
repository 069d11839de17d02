"""Zonos v0.1 (transformer or hybrid) behind the engine's four-stage interface (models/base.py).

preprocess: text → eSpeak phonemes → prefix rows (phonemes, then one row per conditioner with
the request's values inside it, rows.py), then frame 0 of the delayed code grid. forward: the
backbone over both classifier-free-guidance rows at once (backbone.py). sample: the engine
draws codebook 0 from the guided logits; the depth stage draws codebooks 1..8 from the same
hidden state (Zonos predicts a frame's 9 codes in parallel: no depth transformer), batched
across requests; `follow_row` applies the delay pattern and the EOS cascade on the host.
postprocess: the delayed grid is undone per request and complete audio frames stream through
DAC (models/codecs/dac.py).

Zonos' repetition penalty reads each codebook's last two frames. The engine hands
candidate_logits and the depth stage only hidden states, so forward appends the input row's 18
codes (this frame and the previous one) to each hidden row, bit-cast into its dtype; the
sampling rows' windows come back out of the hidden states the engine selects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

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
from models.codecs.dac import DacDetokenizer, DacStream
from models.voice_clip import VOICE_NAME, ClipRules, VoiceClip, resample
from models.zonos import rows as R
from models.zonos import sampling as S
from models.zonos.checkpoint import ZonosWeights
from models.zonos.config import CODEBOOK_SIZE, EMBED_ROWS, EOS_CODE, N_CODEBOOKS
from models.zonos.options import ZonosConditioning
from models.zonos.phonemes import VOCAB_SIZE, phoneme_ids, phonemize
from models.zonos.speaker import SAMPLE_RATE as SPEAKER_RATE
from models.zonos.speaker import SpeakerModel

DEFAULT_VOICE = "default"  # no speaker embedding: the learned unconditional speaker
MAX_TEXT_CHARS = 2000
MAX_POSITIONS = 16384  # the reference's rotary table
DELAY = N_CODEBOOKS - 1  # frames of the grid after an audio frame's codebook 0 until it is whole
WINDOW = 2 * N_CODEBOOKS  # codes per hidden row for the repetition window
_BITS = {2: (torch.int16, 0x3C00), 4: (torch.int32, 0x3C000000)}


@dataclass
class ZonosStream(StreamState):
    dac: DacStream
    grid: list[list[int]] = field(default_factory=list)  # delayed frames 1.. as generated
    ended: bool = False  # codebook 0's EOS seen: no audio frame after it


class ZonosModel(SpeechModel):
    def __init__(
        self,
        weights: ZonosWeights,
        detok: DacDetokenizer,
        name: str = "zonos",
        cfg_scale: float = S.CFG_SCALE,
        speaker_model: SpeakerModel | None = None,
    ) -> None:
        """`speaker_model`: Zonos' speaker model, which turns clips into voices (clients'
        clips: add_clip_voice); without it the model serves its listed voices only."""
        self.weights = weights
        self.detok = detok
        self.cfg_scale = cfg_scale
        self.names = weights.prefix_conditioner.names
        self.voices: dict[str, list[float] | None] = {DEFAULT_VOICE: None}
        self._clip_voices: dict[str, list[float]] = {}  # clients' (add_clip_voice), unlisted
        self.speaker_model = speaker_model if "speaker" in self.names else None
        if detok.num_codebooks != N_CODEBOOKS or detok.codebook_size != CODEBOOK_SIZE:
            raise ModelInputError("Zonos v0.1 needs DAC with 9 codebooks of 1024 codes")
        s = weights.config.backbone
        self.d_model = s.d_model
        # The 9 heads as one matrix [9 · 1025, d_model]: one matmul instead of nine. Made here,
        # from the loaded weights, never inside a captured CUDA graph.
        self._heads = torch.cat([h.weight for h in weights.heads]).detach()
        self.facts = ModelFacts(
            name=name,
            sample_rate=detok.sample_rate,
            token_rate_hz=detok.frame_rate,
            stop_token_ids=(),  # a stop is EOS reaching codebook 8 (is_stop), not one id
            first_chunk_tokens=DELAY + detok.first_chunk + detok.right,
            chunk_tokens=detok.chunk,
            held_back_tokens=DELAY + detok.right,
            voices=(DEFAULT_VOICE,),
            default_voice=DEFAULT_VOICE,
            # Clients' clips become voices through Zonos' speaker model, as --voices-dir clips
            # do (voices.py): the voice alone, so no transcript. Zonos recommends 10-30 s.
            voice_cloning=self.speaker_model is not None,
            clip_rules=ClipRules(min_s=2.0, max_s=30.0, needs_transcript=False),
            max_context=MAX_POSITIONS,
            # Published: temperature 1, min-p 0.1 and the windowed repetition penalty (both
            # applied by this model, sampling.py); the engine's own penalty stays off.
            sampling_defaults={
                "temperature": 1.0,
                "top_k": 0,
                "top_p": 1.0,
                "repetition_penalty": 1.0,
            },
            row_width=R.WIDTH,
        )
        dtype = weights.heads[0].weight.dtype
        if s.ssm is not None:  # the hybrid: its Mamba2 layers' state per request
            self.recurrent_state = weights.backbone.new_state_pool(
                weights.heads[0].weight.device, dtype
            )
        self.shape = BackboneShape(
            num_layers=len(s.attention_layers),  # the paged KV holds the attention layers only
            hidden_size=2 * s.d_model + WINDOW,
            vocab_size=R.COND_BASE + len(self.names),
            num_kv_heads=2 * s.num_kv_heads,
            head_dim=s.head_dim,
            num_q_heads=2 * s.num_heads,
            dtype=dtype,
        )

    # voices ------------------------------------------------------------------------------------
    def add_voices(self, embeddings: dict[str, list[float]]) -> None:
        """Speaker embeddings (name → the speaker conditioner's input) as voices; register them
        before an engine serves the model (its clients read the voice list once)."""
        for name in embeddings:
            if name == DEFAULT_VOICE:
                raise ModelInputError(f"{name!r} is the unconditional voice; name it otherwise")
        self.voices.update(embeddings)
        clip_voices = tuple(sorted(embeddings))
        self.facts = replace(
            self.facts, voices=tuple(self.voices), clip_voices=self.facts.clip_voices + clip_voices
        )

    def set_speaker_model(self, speaker_model: SpeakerModel) -> None:
        """The speaker model, when it is loaded after the model (the first --voices-dir clip):
        clients may then clone voices too."""
        if "speaker" in self.names:
            self.speaker_model = speaker_model
            self.facts = replace(self.facts, voice_cloning=True)

    def speaker_embedding(self, audio16k: np.ndarray) -> list[float]:
        """A clip (float32 mono at 16 kHz) → the speaker conditioner's input."""
        if self.speaker_model is None:
            raise ModelInputError(f"{self.facts.name} has no speaker model: it cannot clone")
        return self.speaker_model.embed(audio16k)

    def add_clip_voice(self, name: str, clip: VoiceClip) -> int:
        """A client's voice: the clip's speaker embedding (the same as a --voices-dir clip's:
        both are resampled to 16 kHz by libswresample), not listed in facts.voices. Its 128
        float32 values are all it holds."""
        if not VOICE_NAME.match(name) or name in self.voices:
            raise ModelInputError(f"voice name {name!r} is taken or not a valid name")
        values = np.asarray(
            self.speaker_embedding(resample(clip.audio, clip.sample_rate, SPEAKER_RATE)),
            dtype=np.float32,
        )
        if not np.isfinite(values).all():
            raise ModelInputError("the speaker model could not read a voice from the clip")
        self._clip_voices[name] = values.tolist()
        return int(values.nbytes)

    def remove_clip_voice(self, name: str) -> None:
        self._clip_voices.pop(name, None)

    def _speaker_values(self, voice: str | None) -> list[float] | None:
        """A request's voice → its speaker embedding (None: the unconditional speaker)."""
        name = voice or DEFAULT_VOICE
        if name in self.voices:
            return self.voices[name]
        # One lookup: a client's voice may be removed from another thread meanwhile.
        values = self._clip_voices.get(name)
        if values is None:
            raise ModelInputError(
                f"unknown voice {name!r}; this model has: {', '.join(self.voices)}"
            )
        return values

    # 1. preprocess ---------------------------------------------------------------------------
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        return self.preprocess_with(text, voice, ZonosConditioning())

    def preprocess_with_options(
        self, text: str, voice: str | None, options: dict[str, float | str]
    ) -> Prompt:
        """A request's options by the names of request_options.py, numbers and the language
        (the generic per-request options path hands them checked and completed with the
        defaults)."""
        return self.preprocess_with(text, voice, ZonosConditioning.from_request(options))

    def preprocess_with(self, text: str, voice: str | None, options: ZonosConditioning) -> Prompt:
        text = text.strip()
        if not text:
            raise ModelInputError("text is empty: give the model something to say")
        if len(text) > MAX_TEXT_CHARS:
            raise ModelInputError(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
        speaker = self._speaker_values(voice)
        ids = phoneme_ids(phonemize(text, options.language))
        values = {
            "speaker": speaker,
            "emotion": list(options.normalised_emotion),
            "fmax": [options.fmax],
            "pitch_std": [options.pitch_std],
            "speaking_rate": [options.speaking_rate],
            "language_id": [float(options.language_id)],
            # The hybrid's further conditioners, at make_cond_dict's defaults (its vqscore_8
            # and dnsmos_ovrl stay unconditional there, so absent here).
            "ctc_loss": [0.0],
            "speaker_noised": [0.0],
        }
        rows: list[Token] = [R.phoneme_row(p) for p in ids]
        rows += [R.cond_row(j, values.get(n)) for j, n in enumerate(self.names) if j > 0]
        rows.append(R.first_frame())
        return Prompt(rows)

    # 2. forward ------------------------------------------------------------------------------
    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows [T, WIDTH] → both CFG rows' embeddings [T, 2, d_model], gathers and selects
        only (fixed shapes, no host synchronisation on a GPU)."""
        w, kind = self.weights, ids[:, 0]
        prefix = w.prefix_conditioner
        codes = ids[:, :N_CODEBOOKS].clamp(0, EMBED_ROWS - 1)
        frame = sum(emb(codes[:, k]) for k, emb in enumerate(w.embeddings))
        if ids.device.type == "cpu" and bool((kind < R.PHONEME_BASE).all()):
            # A decode step on the CPU: frames only, and the check costs no device sync.
            return torch.stack([frame, frame], dim=1)
        phon = prefix.phonemes((kind - R.PHONEME_BASE).clamp(0, VOCAB_SIZE - 1))
        values = ids[:, 2:].to(torch.int32).view(torch.float32)
        index = (kind - R.COND_BASE).clamp(0, len(self.names) - 1)
        cond, uncond = prefix.values(index, ids[:, 1] == 1, values)
        is_frame = (kind < R.PHONEME_BASE)[:, None]
        is_phoneme = (kind < R.COND_BASE)[:, None]
        shared = torch.where(is_phoneme, phon, cond)
        conditional = torch.where(is_frame, frame, shared)
        unconditional = torch.where(is_frame, frame, torch.where(is_phoneme, phon, uncond))
        return torch.stack([conditional, unconditional], dim=1)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        x = self.embed(input_ids)
        if self.recurrent_state is not None:
            hidden = self.weights.backbone(x, positions, attn, self.recurrent_state).flatten(1)
        else:
            hidden = self.weights.backbone(x, positions, attn).flatten(1)
        int_type, offset = _BITS[hidden.element_size()]
        window = (input_ids[:, :WINDOW] + 1 + offset).to(int_type).view(hidden.dtype)
        return torch.cat([hidden, window], dim=1)  # [T, 2·d_model + 18]

    def _window(self, hidden: torch.Tensor) -> torch.Tensor:
        """The codes forward packed into hidden → [N, 9, 2] (this frame, the previous one)."""
        int_type, offset = _BITS[hidden.element_size()]
        packed = hidden[:, 2 * self.d_model :].contiguous().view(int_type).long() - 1 - offset
        return packed.view(-1, 2, N_CODEBOOKS).transpose(1, 2)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, 2·d_model + 18] → the guided logits of all 9 codebooks [N, 9, 1025]."""
        both = hidden[:, : 2 * self.d_model].view(hidden.shape[0], 2, self.d_model)
        heads = F.linear(both, self._heads).float().view(hidden.shape[0], 2, N_CODEBOOKS, -1)
        return S.guided(heads[:, 0], heads[:, 1], self.cfg_scale)

    def ruled_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Zonos' rules before the draw (sampling.py) → [N, 9, 1025] float32."""
        logits = S.forbid_late_eos(self.compute_logits(hidden))
        logits = S.penalise_recent(logits, self._window(hidden), S.REPETITION_PENALTY)
        return S.min_p_filter(logits, S.MIN_P)

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        """Codebook 0, with EOS blocked before min_tokens."""
        logits = self.ruled_logits(hidden)[:, 0].contiguous()
        return Candidates(block_stops(logits, allow_stop, [EOS_CODE]), None)

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        logits = self.ruled_logits(hidden)
        codes = [first_tokens] + [sample(logits[:, k], k) for k in range(1, N_CODEBOOKS)]
        row = torch.full(
            (hidden.shape[0], R.WIDTH), R.ABSENT, dtype=torch.long, device=hidden.device
        )
        row[:, :N_CODEBOOKS] = torch.stack(codes, dim=1)
        return row

    def follow_row(self, prompt, output, token) -> Token:
        return R.follow(output, token)

    def is_stop(self, token: Token) -> bool:
        return R.is_last(token)

    # 4. postprocess --------------------------------------------------------------------------
    def new_stream_state(self) -> ZonosStream:
        return ZonosStream(self.detok.new_stream())

    def enable_cuda_graphs(self, graphs: Any) -> None:
        """The DAC's windows replay from CUDA graphs (DacDetokenizer.enable_cuda_graphs):
        eagerly a job launches hundreds of small kernels."""
        self.detok.enable_cuda_graphs(graphs)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        for state, tokens in zip(states, new_tokens, strict=True):
            assert isinstance(state, ZonosStream)
            state.grid.extend(list(t[:N_CODEBOOKS]) for t in tokens)
            self.detok.push(state.dac, audio_frames(state))
        return self.detok.decode([s.dac for s in states], final)  # type: ignore[attr-defined]


def audio_frames(state: ZonosStream) -> list[list[int]]:
    """The audio frames the grid completes since the last call (the delay pattern undone):
    audio frame j is codebook k of grid frame j + k + 1, whole once frame j + 9 exists; it
    ends where codebook 0 drew EOS. Codes beyond the codec's (mask, EOS) become 0, as the
    reference's output does."""
    out = []
    j = len(state.dac.frames)
    while not state.ended and j + N_CODEBOOKS <= len(state.grid):
        if state.grid[j][0] == EOS_CODE:
            state.ended = True
            break
        codes = [state.grid[j + k][k] for k in range(N_CODEBOOKS)]
        out.append([c if c < CODEBOOK_SIZE else 0 for c in codes])
        j += 1
    return out
