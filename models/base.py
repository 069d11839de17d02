"""The model interface the engine drives (SpeechModel), and the facts a model declares
(ModelFacts). docs/models.md, "The interface", describes it in full.

A step goes through four groups of methods, marked below:
1. preprocess: `preprocess(text, voice) → Prompt` (with `preprocess_with_options`,
   `preprocess_text_stream` / `extend_request`, `preprocess_turns` for turn-based models);
2. forward: `forward(input_ids, positions, attn) → hidden`, the backbone over a step's tokens
   on the engine's paged KV cache, and `compute_logits(hidden)`;
3. sample: `candidate_logits` / `candidates_with_options` (the logits the engine's sampler
   draws from, invalid tokens masked; `device_candidates` for a captured head), and
   `depth_stage` for models whose tokens are rows (ModelFacts.row_width);
4. postprocess: `new_stream_state()` / `stream_state_for(extras)` and
   `detokenize(states, new_tokens, final) → audio`, each request's streaming state explicit.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from models.device_util import upload
from models.recurrent_state import RecurrentStatePool
from models.request_options import OptionSpec, OptionValue
from models.text_feed import TextFeed
from models.voice_clip import ClipRules, PendingVoice, VoiceClip

# A step's token: one vocabulary id, or for models with a depth stage a row of ids (CSM: the
# frame's codebooks then a text column; negative = absent). Same alias as engine.request.Token.
Token = int | tuple[int, ...]
# The clip SpeechModel.warm_up_audio_input runs through a model's audio input: 1 s of quiet at
# 16 kHz, the rate spoken turns reach the models at.
WARM_UP_AUDIO_16K = 16_000


class ModelInputError(ValueError):
    """The request cannot be served by this model (bad voice, empty text, audio to a TTS model…)."""


@dataclass(frozen=True)
class RepetitionAwareSampling:
    """CosyVoice 2's sampling rule (RAS): draw from the top-k/top-p nucleus as usual, but when
    the drawn token already occurs `window * tau_r` times or more among the request's last
    `window` output tokens, draw again from the whole distribution. It breaks the loops a
    nucleus sampler falls into on speech tokens without penalising every repeat."""

    window: int = 10
    tau_r: float = 0.1

    @property
    def max_repeats(self) -> float:
        """A drawn token seen this many times (or more) in the window is drawn again."""
        return self.window * self.tau_r


@dataclass(frozen=True)
class ModelFacts:
    name: str
    sample_rate: int  # Hz of the waveform postprocess returns
    token_rate_hz: float  # LLM tokens per second of audio
    stop_token_ids: tuple[int, ...]
    first_chunk_tokens: int  # tokens needed before the first audio chunk can be decoded
    chunk_tokens: int  # tokens per steady-state detokenizer chunk
    # A larger chunk the detokenizer decodes for less a token (SNAC: one call's fixed cost
    # for twice the audio); a listener with a comfortable buffer waits for it
    # (engine/scheduler.py). None: chunk_tokens always.
    large_chunk_tokens: int | None = None
    # The fewest new tokens that decode to more audio (Orpheus: one 7-code frame); the
    # scheduler decodes this little when a listener would otherwise run dry.
    frame_tokens: int = 1
    # Tokens of codes the detokenizer has before their audio comes out (see
    # engine.scheduler.ChunkingFacts.held_back_tokens).
    held_back_tokens: int = 0
    # Tokens after a chunk the detokenizer reads before it can decode the chunk (CosyVoice 2's
    # flow: its 3-token look-ahead conv). first_chunk_tokens counts them; the chunk's audio
    # does not (see engine.scheduler.ChunkingFacts.lookahead_tokens).
    lookahead_tokens: int = 0
    accepts_text: bool = True
    accepts_audio: bool = False
    # Turn-based speech-to-speech: the model answers a conversation (SpeechRequest.turns)
    # through preprocess_turns, and heard_reply turns a reply into the history's next turn.
    accepts_turns: bool = False
    # Turn-based models that take a system prompt with a user turn (TurnFromSpeech /
    # TurnFromText `system`: the Realtime API's `instructions`).
    system_prompt: bool = False
    # Turn-based models trained with function calling: the name of their tool-call syntax
    # (models/tool_calls.py parser_for). They take the session's tools with each request
    # (ToolsTurn) and a tool's result as a turn (TurnFromToolOutputs). None: no tools.
    tool_call_syntax: str | None = None
    full_duplex: bool = False
    voices: tuple[str, ...] = ()
    default_voice: str | None = None
    # Which of `voices` were made from reference clips (--voices-dir); the rest are the
    # model's own presets. GET /v1/voices reports each voice's source from this.
    clip_voices: tuple[str, ...] = ()
    # The model can make a voice from a reference clip (+ its transcript) at all, and which
    # clips it can use (length, transcript): a client's clip is checked against them
    # (models/voice_clip.py) before the model's add_clip_voice encodes it.
    voice_cloning: bool = False
    clip_rules: ClipRules = field(default_factory=ClipRules)
    max_context: int = 4096
    # Sampling values the model was trained/tuned with; callers' own values override them.
    sampling_defaults: dict[str, float] = field(default_factory=dict)
    # The options a request may set (SpeechRequest.model_options): its family's
    # request_options as plain specs (models/request_options.py), which the registry fills in
    # when a model leaves them (); () for a model that takes none. The engine hands each request's values to preprocess_with_options and
    # candidates_with_options.
    request_options: tuple[OptionSpec, ...] = ()
    # 0: each token is one id. W > 0: each token is a row of W ids (see Token); column 0 is the
    # one the engine's sampler draws from candidate_logits, the depth stage fills the rest.
    row_width: int = 0
    # The model's own sampling rule on top of temperature/top-k/top-p, when it has one.
    repetition_aware: RepetitionAwareSampling | None = None
    # The model serves with a second detokenizer context (SpeechModel.first_chunk_lane_codec)
    # that may decode requests' first chunks on another thread and stream while a steady job
    # runs (the engine's first-chunk lane, docs/engine.md). Its stream states must be plain data
    # that either context can continue. A family that offers it may let the user turn it off
    # (--no-first-chunk-lane: models/codecs/lane_option.py).
    first_chunk_lane: bool = False
    # The first-audio margin (EngineConfig.first_audio_margin) this model measured best with a
    # threaded codec (CUDA); None: the engine's default, 3.
    first_audio_margin: float | None = None
    # With a first-chunk lane: a steady detokenizer job waits (while no listener needs it soon)
    # until this many streams have a chunk ready, for codecs whose job costs about the same at
    # 1 row as at 16 (CosyVoice 2's flow + HiFT, --steady-batch-rows); 0: never.
    steady_batch_rows: int = 0
    # For codecs that replay a job as several CUDA graphs and ask the engine's graphs to
    # `pace` between them (flow + HiFT): whether the pacing waits (CallableGraphs.pace); and
    # for codecs that name blocks to compile before capture, whether they are compiled
    # (CallableGraphs.compile_regions). Other codecs never ask, so these change nothing for
    # them. The flow + HiFT families set both from their --codec-pacing / --compile-codec
    # options (models/codecs/flow_hift/serving_options.py).
    codec_pacing: bool = True
    compile_codec: bool = True
    # The model knows which word of its text each generated token says (reading_position and
    # Prompt.words), so the engine can time the words it speaks (engine/word_timing.py).
    word_timings: bool = False
    # The model takes a request's text while it generates (models/text_feed.py): it opens
    # the request with preprocess_text_stream and turns later text into ids with
    # extend_request (EngineClient.append_text). Others take the whole text up front. Models
    # with rows only (row_width): each id goes into a column of a generated row.
    appends_text: bool = False

    @property
    def seconds_per_token(self) -> float:
        return 1.0 / self.token_rate_hz

    @property
    def supports_async_scheduling(self) -> bool:
        """Whether the engine may launch step n+1 before step n's tokens reach the host (see
        engine/core.py). It needs each step's input to be one id the device already holds
        and sampling that reads nothing of the output on the host but its length (CosyVoice
        2's repetition-aware window is a ring on the device: engine/sampling.py). Rows with a
        depth stage (CSM, Moshi, voxgate-tiny) and full-duplex sessions keep the synchronous
        step."""
        return self.row_width == 0 and not self.full_duplex


@dataclass(frozen=True)
class BackboneShape:
    """What the engine needs to size the paged KV cache."""

    num_layers: int
    hidden_size: int
    vocab_size: int
    num_kv_heads: int
    head_dim: int
    num_q_heads: int
    dtype: torch.dtype

    @classmethod
    def of(cls, args: Any, module: torch.nn.Module, vocab_size: int | None = None) -> BackboneShape:
        """From a backbone's models.layers.llama.LlamaArgs and the module holding its weights
        (their dtype); `vocab_size` where the sampled vocabulary is not the backbone's."""
        return cls(
            num_layers=args.num_layers,
            hidden_size=args.hidden_size,
            vocab_size=args.vocab_size if vocab_size is None else vocab_size,
            num_kv_heads=args.num_kv_heads,
            head_dim=args.head_dim,
            num_q_heads=args.num_heads,
            dtype=next(module.parameters()).dtype,
        )


@dataclass(frozen=True)
class TextWord:
    """A word of a request's text as the model reads it, and the reading positions that say
    it: [start, end) in the sequence `SpeechModel.reading_position` walks through."""

    text: str
    start: int
    end: int


@dataclass
class Prompt:
    token_ids: list[Token]
    extras: dict[str, Any] = field(default_factory=dict)
    # Models with facts.word_timings: the text's words, in order, with their reading positions.
    words: tuple[TextWord, ...] = ()
    # A request opened for streamed text (preprocess_text_stream): the ids it consumes as it
    # generates, extended by extend_request.
    text_feed: TextFeed | None = None
    # The fewest and most tokens the model's published inference lets this text make (CosyVoice
    # 2: 2 and 20 a text token), which the engine holds a request to unless it fixes its own
    # length (SamplingParams.within); None: no rule beyond the request's.
    length: tuple[int, int] | None = None


@dataclass
class Candidates:
    logits: torch.Tensor  # [N, K] float32
    token_ids: torch.Tensor | None  # [N, K] vocabulary id of each column; None: column == id


class CodeSampler(Protocol):
    """Handed to a depth stage by the engine: draws one code per request from `logits` [N, V]
    (float32, column = code) for codebook `index`, with each request's own temperature, top-k,
    top-p and seed, on the device and without synchronising with the host. Returns [N] int64."""

    def __call__(self, logits: torch.Tensor, index: int) -> torch.Tensor: ...


class StreamState:
    """Per-request detokenizer state (buffered codes, cached conv state…), owned by the model."""


class LaneCodec(Protocol):
    """A second detokenizer context for the engine's first-chunk lane (ModelFacts.
    first_chunk_lane): the model's weights, but buffers, CUDA graphs and graph memory of its
    own, so that its `detokenize` may run on another thread and CUDA stream at the same time
    as the model's. The engine gives it requests' first chunks, and chunks whose listener
    would run dry waiting for the model's own job (streams either one began)."""

    max_rows: int  # requests per job its captured shapes hold (larger jobs still work)

    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """As SpeechModel.detokenize."""
        ...

    def enable_cuda_graphs(self, graphs: Any) -> None:
        """Capture its shapes with a CallableGraphs of its own (its own memory pool: graphs of
        one pool replayed at once on two streams would overwrite each other's memory)."""
        ...

    def hand_over(self, states: list[StreamState], stream: Any) -> None:
        """The states' device memory, allocated on another stream, is used on `stream` from
        now on (after a lane job: the steady detokenizer's; before one: the lane's own); record
        it so the allocator does not reuse it while that stream may still read it. No-op on
        CPU."""
        ...


class DuplexModel(Protocol):
    """What a full-duplex model (ModelFacts.full_duplex: Moshi) offers besides SpeechModel:
    the engine's duplex loop (engine/duplex.py) feeds each session's audio in frame by frame
    while it speaks, and streams its transcript."""

    # float32 samples of one frame at facts.sample_rate: what the loop takes from each
    # session's input per step (and what each step's audio holds).
    samples_per_frame: int

    def new_input_state(self) -> Any:
        """A new session's input state (its streaming audio encoder's, and the codes waiting
        for next_input_row)."""
        ...

    def encode_input(self, states: list[Any], frames: list[np.ndarray]) -> None:
        """One frame (samples_per_frame float32 samples) per session, encoded together; the
        codes wait in each state for next_input_row. Returns nothing."""
        ...

    def next_input_row(self, state: Any, sampled: Token, position: int) -> Token:
        """The row sampled at `position` completed with the user's newest frame: the input
        of position + 1."""
        ...

    def text_piece(self, token: Token) -> str:
        """The transcript text of a sampled row's text token ('' for padding)."""
        ...


class SpeechModel(abc.ABC):
    facts: ModelFacts
    shape: BackboneShape
    # Per-request state of recurrent (Mamba-style) layers beside the paged KV, or None for a
    # model whose backbone is all attention (models/recurrent_state.py says how the engine
    # drives it: begin_step before each forward, free when a request ends).
    recurrent_state: RecurrentStatePool | None = None

    # 1. preprocess ---------------------------------------------------------------------------
    @abc.abstractmethod
    def preprocess(self, text: str, voice: str | None) -> Prompt:
        """Format and tokenise the prompt. Raises ModelInputError for input it cannot serve."""

    def preprocess_with_options(
        self, text: str, voice: str | None, options: dict[str, OptionValue]
    ) -> Prompt:
        """preprocess for a model with request options (facts.request_options): `options` holds
        every one of them, checked and with the defaults filled in. A model that conditions
        its prompt on them (Chatterbox's exaggeration) overrides this; the engine keeps
        `options` with the request for candidates_with_options. Default: preprocess."""
        return self.preprocess(text, voice)

    def preprocess_text_stream(
        self, text: str, voice: str | None, options: dict[str, OptionValue]
    ) -> Prompt:
        """Models with facts.appends_text: open a request whose text is still arriving with
        its first part; the Prompt's text_feed holds the ids it consumes as it generates."""
        raise ModelInputError(
            f"{self.facts.name} cannot take streamed text into a running request; send the "
            "whole text (the gateway cuts streamed text into sentences for it)"
        )

    def extend_request(self, extras: dict[str, Any], text: str, final: bool) -> list[int]:
        """Models with facts.appends_text: more of a streamed request's text (`final`: the
        last of it) → the ids to append to its text_feed. `extras` is the request's
        Prompt.extras, where the model keeps what it needs between pieces. Raises
        ModelInputError for text it cannot take."""
        raise ModelInputError(f"{self.facts.name} cannot take streamed text")

    def preprocess_turns(self, turns: Sequence[Any]) -> Prompt:
        """Turn-based models (facts.accepts_turns): the conversation so far (the model's own
        turn objects), ending with the user's turn → the prompt to answer it. The ids of an
        earlier part of the conversation must be a prefix of these, so that the engine can
        reuse its KV. Raises ModelInputError for turns it cannot serve."""
        raise ModelInputError(
            f"{self.facts.name} does not take conversation turns; send it text instead"
        )

    # turns (facts.accepts_turns; engine/loop.py prepare_turn) --------------------------------
    # A turn-based model makes the turn objects preprocess_turns reads from what a session
    # says. The defaults refuse: a model that is not turn-based takes no turns.
    def user_audio_turn(self, pcm_16k: np.ndarray, system: str | None = None) -> Any:
        """Turn-based models: a user's spoken turn (float32 mono, 16 kHz) → the model's user
        turn, with the session's instructions from it on (`system`, facts.system_prompt
        models; None: those in force). ModelInputError when it holds nothing to answer."""
        raise ModelInputError(f"{self.facts.name} is not a turn-based model")

    def user_audio_turns(
        self, pcms_16k: Sequence[np.ndarray], systems: Sequence[str | None]
    ) -> list[Any]:
        """Turn-based models with a batched audio stage (Step-Audio 2's encoder): several
        sessions' spoken turns → each one's user turn, or the ModelInputError its session gets,
        in one run of the stage. The engine calls it only where a model overrides it
        (has_batched_audio_turns); the default takes them one by one."""
        return [self.user_audio_turn(p, s) for p, s in zip(pcms_16k, systems, strict=True)]

    def has_batched_audio_turns(self) -> bool:
        """Whether the model overrides user_audio_turns (the engine then batches turns)."""
        return type(self).user_audio_turns is not SpeechModel.user_audio_turns

    def user_text_turn(self, text: str, system: str | None = None) -> Any:
        """Turn-based models: a user's typed turn → the model's user turn (`system` as
        user_audio_turn's). ModelInputError for an empty one."""
        raise ModelInputError(f"{self.facts.name} is not a turn-based model")

    def tools_turn(self, tools: Sequence[Any]) -> Any:
        """Turn-based models trained with function calling (facts.tool_call_syntax): the
        session's tools (FunctionTool) → the turn that leads its requests' conversations."""
        raise ModelInputError(f"{self.facts.name} was not trained with tool calls")

    def tool_output_turn(self, outputs: Sequence[str]) -> Any:
        """Function-calling models: the results of the last reply's tool calls → the turn
        that answers them."""
        raise ModelInputError(f"{self.facts.name} was not trained with tool calls")

    def tool_call_turn(self, name: str, arguments: str) -> Any:
        """Function-calling models: a call the client put in the conversation (not one of
        the model's replies) → an assistant turn."""
        raise ModelInputError(f"{self.facts.name} was not trained with tool calls")

    def heard_reply(self, output_ids: Sequence[Token], heard_s: float | None) -> Any:
        """Turn-based models: a reply's generated ids (Finished.output_ids) → the assistant
        turn to keep in the history; with `heard_s`, only what the user heard (barge-in). The
        turn has the `token_ids` it keeps."""
        raise ModelInputError(f"{self.facts.name} is not a turn-based model")

    def assistant_text_turn(self, text: str) -> Any:
        """Turn-based models: text the client puts in the conversation as the model's own
        words → an assistant turn holding it as text (no speech). ModelInputError for an
        empty or too long one."""
        raise ModelInputError(f"{self.facts.name} is not a turn-based model")

    def erased_turn(self, turn: Any) -> Any:
        """Turn-based models: a turn of the history (one this model made) as it stays once
        taken out of the conversation: in its place, so the turns still alternate, with
        nothing of what was said (an empty message; a user turn keeps its system prompt)."""
        raise ModelInputError(f"{self.facts.name} is not a turn-based model")

    def is_text_token(self, token: Token) -> bool:
        """Turn-based models whose replies interleave text and speech: is this generated
        token transcript text? The engine then streams the transcript (reply_text)."""
        return False

    def reply_text(self, output_ids: Sequence[Token]) -> str:
        """Turn-based models: the transcript of a reply so far (its text tokens decoded
        together), streamed by the engine as TextDelta events."""
        return ""

    # voices from clients (models/voice_clip.py) ----------------------------------------------
    def add_clip_voice(self, name: str, clip: VoiceClip) -> int | PendingVoice:
        """Cloning-capable models (facts.voice_cloning): encode `clip` (already checked
        against facts.clip_rules) once and serve requests with voice=name in its voice, without
        listing it in facts.voices. Runs beside the engine loop, so it may only add the voice
        as a dict entry, never touch state a step reads; it returns the bytes the voice holds,
        for the caller's cache bounds. A model whose voice must change such state (a table the
        forward reads) encodes here and returns a PendingVoice instead, whose install() the
        engine runs on the loop's thread between steps (models/voice_clip.py)."""
        raise ModelInputError(f"{self.facts.name} cannot make a voice from a clip")

    def remove_clip_voice(self, name: str) -> None:
        """Forget a voice add_clip_voice made (no-op for unknown names). Requests already
        admitted with it keep what they took from it."""
        return None  # a model that cannot clone holds no such voices

    # 2. forward ------------------------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: Any) -> torch.Tensor:
        """input_ids, positions: [T] (all scheduled tokens of the step, flattened); input_ids is
        [T, row_width] for models whose tokens are rows.
        `attn` is the engine's attention context for this step. Returns hidden [T, H]."""

    @abc.abstractmethod
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, H] → logits over the whole vocabulary [N, V] (float32)."""

    # 3. sample -------------------------------------------------------------------------------
    def candidate_logits(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates:
        """The logits the sampler chooses among, one row per request, with tokens invalid at
        each row's output position masked to -inf (stop tokens before min_tokens, at least).
        Models whose valid set is small return just those columns and their token ids, which
        makes top-p and the repetition penalty cheap. Default: the whole vocabulary."""
        logits = self.compute_logits(hidden)
        return Candidates(block_stops(logits, allow_stop, self.facts.stop_token_ids), None)

    def candidates_with_options(
        self,
        hidden: torch.Tensor,
        num_generated: list[int],
        allow_stop: list[bool],
        options: list[dict[str, OptionValue]],
    ) -> Candidates:
        """candidate_logits with each row's request options (as preprocess_with_options got
        them; {} for a model that takes none), for models whose sample stage reads them
        (Chatterbox's CFG weight). The engine calls this one. Default: candidate_logits."""
        return self.candidate_logits(hidden, num_generated, allow_stop)

    def device_candidates(
        self, hidden: torch.Tensor, allow_stop: torch.Tensor, steps: torch.Tensor
    ) -> Candidates | None:
        """candidate_logits from device tensors alone (allow_stop [N] bool; steps [N] int64,
        each row's output position, i.e. its num_generated), with fixed shapes
        and no host synchronisation, so that the engine can capture a decode step's head and
        sampling in one CUDA graph (engine/sampling_graphs.py). Models that can override it;
        the engine captures only overrides. The default (None) keeps eager sampling, for
        candidates that need the host."""
        return None

    def device_candidates_of(
        self, hidden: torch.Tensor, num_generated: list[int], allow_stop: list[bool]
    ) -> Candidates | None:
        """device_candidates from candidate_logits' host lists (uploaded): the eager path of a
        model whose candidates are the graphed ones."""
        device = hidden.device
        return self.device_candidates(
            hidden,
            upload(allow_stop, torch.bool, device),
            upload(num_generated, torch.long, device),
        )

    def graphable_candidates(self) -> bool:
        """Whether device_candidates serves this model as loaded (the engine then captures a
        decode step's head and sampling in one CUDA graph). Default: the class overrides
        device_candidates. A model whose override serves only some configurations (a
        sampling constraint that is off) says so here."""
        return type(self).device_candidates is not SpeechModel.device_candidates

    def prompt_graphs_sample_eagerly(self) -> bool:
        """Whether the engine may replay this model's forward over fresh prompts from graphs
        (engine/prompt_graphs.py) although its decode step samples eagerly (no sampling
        graphs: its tokens are rows, or its head needs host lists): the prompts' last hidden
        states then go through the eager head and sampler (and a row model's depth stage). A
        model says True once its forward over a prompt is checked to be that of its decode
        step over more rows (no host reads, no branch on the token count). Default: False."""
        return False

    def depth_stage(
        self, hidden: torch.Tensor, first_tokens: torch.Tensor, sample: CodeSampler
    ) -> torch.Tensor:
        """Models whose tokens are rows (row_width > 0: CSM, Moshi): hidden [N, H] of the
        sampling rows, first_tokens [N] the column-0 ids the engine drew → the step's full rows
        [N, row_width] on the device, the depth transformer batched across requests."""
        raise NotImplementedError(f"{type(self).__name__} declares row tokens but no depth stage")

    def codec_would_emit(self, state: StreamState, new_tokens: int) -> bool:
        """Whether the codec, given `new_tokens` more of a stream's tokens now, would emit
        audio: the engine sends a listener short of audio to the codec with what it has only
        then (a job that gives it nothing keeps it out of the next one). Default: any whole
        frame decodes (ModelFacts.frame_tokens)."""
        return True

    def first_chunk_audio_s(self, tokens: Sequence[Token], more: int = 0) -> float | None:
        """Seconds of audio a stream's first detokenizer job makes of its first generated
        `tokens`, for a model whose tokens do not all become audio at the rate of ModelFacts'
        rule (the first chunk, then whole frames of frame_tokens, less the look-ahead and
        held-back tokens: engine.scheduler.ChunkingFacts.first_chunk_audio_tokens), such as
        replies that interleave text with speech, or codecs that make audio only at chunk
        edges. None (the default): the rule holds. The scheduler sizes a first chunk's cover
        by it, so it must not overstate the audio. With `more` > 0: the audio once `more`
        tokens still to come are generated too, counted as the model's replies mix text and
        speech; the scheduler judges by it whether a first chunk past its first-audio budget
        waits for the tokens that spare its listener a gap."""
        return None

    def quantize_for_cpu(self) -> bool:
        """Switch the model to int8 weights for CPU serving (`--cpu-int8`, models/cpu_int8.py).
        Returns False when the model has no such path (the default)."""
        return False

    def follow_row(self, prompt: Sequence[Token], output: Sequence[Token], token: Token) -> Token:
        """The sampled `token` as it joins the output and is fed back: a model may complete it
        on the host from the request's prompt and output so far (voxgate-tiny's reading
        pointer writes the characters it points at). Default: unchanged. Models that change it
        must keep the synchronous step (rows do: ModelFacts.supports_async_scheduling)."""
        return token

    def may_stop(self, prompt: Sequence[Token], output: Sequence[Token]) -> bool:
        """Whether the request may end after `output` (besides min_tokens, which the engine
        checks): voxgate-tiny's reading pointer must have reached the last sound of its text.
        Called on the host for every sampling request of every step. Default: True."""
        return True

    def reading_position(self, token: Token) -> int | None:
        """Models with facts.word_timings: the position in the text (Prompt.words' unit) that a
        generated token's audio says; positions never decrease along a request. Default: None."""
        return None

    def is_stop(self, token: Token) -> bool:
        """Whether `token` ends generation (the engine honours it after min_tokens)."""
        return token in self.facts.stop_token_ids

    # 4. postprocess --------------------------------------------------------------------------
    @abc.abstractmethod
    def new_stream_state(self) -> StreamState: ...

    def stream_state_for(self, extras: dict[str, Any]) -> StreamState:
        """The stream state of a request whose preprocess returned Prompt.extras `extras`; models
        whose codec is conditioned per request (CosyVoice 2: the voice's prompt mel, tokens and
        speaker embedding) override this. Default: new_stream_state()."""
        return self.new_stream_state()

    @abc.abstractmethod
    def detokenize(
        self, states: list[StreamState], new_tokens: list[list[Token]], final: list[bool]
    ) -> list[np.ndarray]:
        """Feed each request's newly generated tokens into its stream state and return the
        audio now decodable (float32 mono at facts.sample_rate, possibly empty). With
        `final`, flush everything. Chunked output must equal whole-utterance decoding."""

    def use_fused_kernels(self) -> bool:
        """Optional: switch the backbone to fused GPU kernels (FlashInfer's norm/RoPE/activation)
        where they apply; returns whether it did. Called by the engine with FlashInfer attention."""
        return False

    def enable_cuda_graphs(self, graphs: Any) -> None:  # noqa: B027 - optional hook
        """Optional: capture the detokenizer's common shapes with the engine's CallableGraphs."""

    def first_chunk_lane_codec(self) -> LaneCodec | None:
        """Models with facts.first_chunk_lane: a new second detokenizer context for the engine's
        first-chunk lane (LaneCodec). Default: None (no lane)."""
        return None

    def warm_up_batches(self, max_batch: int) -> None:  # noqa: B027 - optional hook
        """Optional: run the codec once at every batch shape it takes for up to `max_batch`
        streams, so first-use setup (cuDNN plans) is paid before serving, not by a listener."""

    def warm_up_audio_input(self) -> None:  # noqa: B027 - optional hook
        """Optional, for models that take spoken turns: run the audio-input stage (features,
        encoder) once on a short clip, so its first-use costs (imports, kernels loaded on first
        launch, cuDNN and cuBLAS setup) are paid before serving, not by the first user turn,
        whose reply waits for them. The clip: WARM_UP_AUDIO_16K."""

    def release(self) -> None:  # noqa: B027 - optional hook
        """Free model resources (GPU memory) on shutdown."""


def block_stops(
    logits: torch.Tensor, allow_stop: list[bool], stop_columns: Sequence[int]
) -> torch.Tensor:
    """Mask (to -inf, in place) the stop columns of the rows not yet allowed to stop (before
    their min_tokens); returns `logits`."""
    blocked = [i for i, ok in enumerate(allow_stop) if not ok]
    if blocked:
        rows = upload(blocked, torch.long, logits.device)
        stops = upload(list(stop_columns), torch.long, logits.device)
        logits[rows[:, None], stops[None, :]] = float("-inf")
    return logits
