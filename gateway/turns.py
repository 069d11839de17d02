"""A turn-based speech-to-speech conversation on one session (GLM-4-Voice).

How it maps onto PROTOCOL v1 (docs/gateway.md, "Turn-based speech-to-speech sessions"):

    binary frames ──TurnInput (VAD or manual)──▶ input.speech_started / input.speech_stopped
                                                 and the finished turn's audio
    turn audio ──TurnFromSpeech (the model's speech tokenizer, in the engine)──▶ user turn
    history + user turn ──SpeechRequest(turns, conversation_id)──▶ one reply: response.started,
                                                 audio, transcript.delta, response.done

The history lives here (gateway/turn_history.py), one entry per turn, user and assistant
alternating, each under an id a client can take it out by (ForgetTurn: erased in place). The
engine keeps the conversation's KV between turns (`conversation_id` = the session id) and
reuses the common prefix, so a turn costs only its new tokens. Barge-in — the user starting to
speak while a reply plays, or `response.cancel` — cancels the reply within one engine step,
and the reply enters the history cut to what the user heard (`HeardReply`): the client's
`playback` report when it sent one, else the server's own send clock.

Turn detection's `create_response` false (the Realtime API's; also its manual turns, which a
commit ends) holds each turn: it joins the history with no reply until the client asks for
one (`AnswerTurns`; gateway/held_turns.py keeps the history alternating meanwhile).
`interrupt_response` false lets speech during a reply leave it playing: the user's turn is
answered after it.

With tools (models trained with tool calls; the Realtime API's `tools`), the model's tools
element leads each request's turns, and a tool's results (`ToolOutputs`) are a turn answered
like a user's; a client's own call (`ToolCall`) joins the history with no reply.

With `--speculative-turn-ms`, a pause in the user's speech begins the reply to the turn so far,
held back until the VAD confirms the end of turn, and dropped if the user speaks on
(gateway/speculative_turn.py).

The history holds the model's own turn objects, opaque here: the engine makes them
(engine/api.py's turn commands, run where the model is loaded, in whichever process).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Any

from engine.api import (
    EngineClient,
    EngineDead,
    ErasedTurn,
    HeardReply,
    ModelInputError,
    ReplyFromText,
    ReplyTranscript,
    ToolsTurn,
    TurnFromSpeech,
    TurnFromText,
    TurnFromToolCall,
    TurnFromToolOutputs,
)
from gateway.audio import OpenEncoder
from gateway.config import GatewaySettings
from gateway.held_turns import HeldTurn, HeldTurns
from gateway.input_transcription import InputTranscriber, InputTranscription
from gateway.metrics import GatewayMetrics
from gateway.protocol import (
    AudioSpec,
    ErrorCode,
    ErrorEvent,
    InputCommit,
    InputTranscript,
    Playback,
    ProtocolError,
    ResponseCancel,
    SpeechStarted,
    TextInput,
    TranscriptDelta,
    TurnDetection,
)
from gateway.reply import Emitter, SpeechOptions
from gateway.response_overrides import ResponseOverrides
from gateway.speculative_turn import Decision, SpeculativeTurn
from gateway.turn_history import TurnHistory
from gateway.turn_input import TurnInput, TurnPaused, TurnResumed, UserAudioTurn
from gateway.turn_reply import ReplyOutcome, TurnReply
from gateway.wire import (
    AnswerTurns,
    AssistantMessage,
    ForgetTurn,
    InputClear,
    InputCleared,
    InputCommitted,
    ToolCall,
    ToolOutputs,
    Truncate,
    Truncated,
    TurnForgotten,
)
from models.tool_calls import FunctionTool


@dataclass(frozen=True)
class TextTurn:
    """A typed user turn, with the options of the response that answers it (OpenAI
    response.create's own; None: the session's)."""

    text: str
    overrides: ResponseOverrides | None = None
    turn_id: str | None = None  # its id in the history (TextInput's)
    answered: bool = True  # False: it joins the history unanswered (TextInput's)


# What waits for the player task.
QueuedTurn = (
    UserAudioTurn
    | SpeculativeTurn
    | HeldTurn
    | AnswerTurns
    | TextTurn
    | ToolOutputs
    | ToolCall
    | AssistantMessage
)


class TurnConversation:
    # The client events a turn-based session handles here (`handle`), besides audio frames.
    HANDLES = (
        TextInput,
        ResponseCancel,
        Playback,
        InputCommit,
        InputClear,
        Truncate,
        ToolOutputs,
        ToolCall,
        AnswerTurns,
        AssistantMessage,
        ForgetTurn,
    )

    @classmethod
    def for_engine(
        cls,
        engine: EngineClient,
        session_id: str,
        settings,
        emit: Emitter,
        metrics,
        open_encoder: OpenEncoder,
        log,
        transcriber: InputTranscriber | None = None,
    ) -> TurnConversation | None:
        """The session's conversation when the engine serves a turn-based model, else None."""
        if not engine.facts.accepts_turns or engine.facts.full_duplex:
            return None
        return cls(engine, session_id, settings, emit, metrics, open_encoder, log, transcriber)

    def __init__(
        self,
        engine: EngineClient,
        conversation_id: str,
        settings: GatewaySettings,
        emit: Emitter,
        metrics: GatewayMetrics,
        open_encoder: OpenEncoder,
        log,
        transcriber: InputTranscriber | None = None,
    ) -> None:
        self._engine, self._conversation_id = engine, conversation_id
        # Transcribes spoken turns for sessions that ask (options.input_transcription).
        self._transcriber = transcriber
        self._transcripts: set[asyncio.Task] = set()  # transcriptions in flight
        self._last_transcript: asyncio.Task | None = None  # the latest turn's
        self._settings, self._emit, self._metrics, self._log = settings, emit, metrics, log
        self._open_encoder = open_encoder
        self.options = SpeechOptions()  # session.start / session.update set it
        self._input: TurnInput | None = None
        self._spec, self._detection = AudioSpec(), TurnDetection()
        self.history = TurnHistory()  # the model's turn objects, user first, alternating
        self._held = HeldTurns(engine, self.history)  # user turns waiting for AnswerTurns
        self._last_reply_ids: tuple | None = None  # the last reply's whole output, for truncate
        self._last_reply_at = -1  # its place in the history (held user turns may follow it)
        self._last_reply_speed = 1.0  # the speed it played at: truncate's time is played time
        # The last reply, when it was cut at barge-in and is still the newest turn: a playback
        # report that was in flight when it was cut still moves the cut (see report_playback).
        self._cut_reply: TurnReply | None = None
        self._playback_reports = 0  # the client's playback reports so far
        self._queue: collections.deque[QueuedTurn] = collections.deque()
        # The model's tools element for options.tools, made once per set of tools.
        self._tools: tuple[tuple[FunctionTool, ...], Any] | None = None
        self._ready = asyncio.Event()
        self._text: list[str] = []  # text of a user turn still streaming in (final: false)
        self._steered = False  # a user turn has carried a response's own instructions
        self._reply: TurnReply | None = None
        # The queued turn being prepared or answered (not in the history yet).
        self._current: QueuedTurn | None = None
        self._speculation: SpeculativeTurn | None = None  # a reply begun at a pause
        self._answering = False
        self._idle = asyncio.Event()  # set while no reply is being prepared or played
        self._idle.set()
        self._interrupted = False  # the user spoke again before the reply began
        self.last_played = time.monotonic()
        self.replies = 0
        # Per reply: prompt tokens whose KV the engine kept from the turns before (not prefilled).
        self.reused_tokens: list[int] = []

    @property
    def busy(self) -> bool:
        return self._answering or bool(self._queue)

    async def handle(self, event: object) -> bool:
        """Text, cancel, playback, commit, clear and truncate are this conversation's; others
        are the session's (False). Raises ProtocolError (answered as a non-fatal `error`)."""
        if not isinstance(event, self.HANDLES):
            return False
        if isinstance(event, TextInput):
            self.add_text(event)
        elif isinstance(event, ResponseCancel):
            self.cancel()
        elif isinstance(event, Playback):
            await self.report_playback(event.played_ms)
        elif isinstance(event, InputCommit):
            self.commit()
        elif isinstance(event, InputClear):
            self.clear()
        elif isinstance(event, Truncate):
            await self.truncate(event.audio_end_ms)
        elif isinstance(event, ForgetTurn):
            await self.forget(event)
        elif isinstance(event, ToolOutputs | ToolCall | AnswerTurns | AssistantMessage):
            self._enqueue(event)
        return True

    def start(self, options: SpeechOptions, input_audio: AudioSpec, detection: TurnDetection):
        self.options = options
        self._spec, self._detection = input_audio, detection
        self._input = self._turn_input()

    def reconfigure(
        self, options: SpeechOptions, input_audio: AudioSpec | None, detection: TurnDetection | None
    ) -> None:
        """New options for later replies; a change of input format or of how turns are
        detected (OpenAI `session.update`) drops the audio of a turn in progress with the old
        settings. A reply begun at a pause is dropped either way: whether the turn gets a reply
        may have changed (`create_response`)."""
        self.options = options
        if input_audio is None and detection is None:
            return
        spec, detection = input_audio or self._spec, detection or self._detection
        same_input = spec == self._spec and detection.same_vad(self._detection)
        self._spec, self._detection = spec, detection
        self._drop_speculation()
        if not same_input:
            self._input = self._turn_input()

    def _turn_input(self) -> TurnInput:
        return TurnInput(self._spec, self._detection, early_ms=self._settings.speculative_turn_ms)

    # --- input (the session's reader) ------------------------------------------------------
    def push(self, data: bytes) -> None:
        """One binary frame of user audio; raises UndecodableAudio for a bad frame."""
        if self._input is None:
            return
        for event in self._input.push(data):
            self._on_input(event)

    def commit(self) -> None:
        """`input.commit`: the user's turn ends now. Raises ProtocolError (no audio)."""
        if self._input is None:
            return
        for event in self._input.commit():
            self._on_input(event)

    def clear(self) -> None:
        self._drop_speculation()
        if self._input is not None:
            self._input.clear()
        self._emit.event(InputCleared())

    def add_text(self, event: TextInput) -> None:
        """Typed text is a user turn too; `final: false` pieces gather until `final`."""
        s = self._settings
        if len(event.text) > s.max_text_chars:
            raise ProtocolError(
                ErrorCode.TOO_LARGE, f"one text event is limited to {s.max_text_chars} characters"
            )
        if sum(map(len, self._text)) + len(event.text) > s.max_response_text_chars:
            raise ProtocolError(
                ErrorCode.TOO_LARGE, f"a turn is limited to {s.max_response_text_chars} characters"
            )
        self._text.append(event.text)
        if event.final:
            text, self._text = "".join(self._text), []
            if not text.strip():
                raise ProtocolError(ErrorCode.BAD_FIELD, "`text` is empty")
            self._enqueue(TextTurn(text, event.overrides, event.turn_id, event.answered))

    def cancel(self) -> None:
        """Barge-in (`response.cancel`, or the user speaking): the reply playing stops; one
        about to begin does not."""
        if self._answering:
            self._interrupted = True
        if self._reply is not None:
            self._reply.cancel()

    async def report_playback(self, played_ms: float) -> None:
        """The client's playback position in the current reply; or in the last one, if it was
        cut and no turn has followed yet: clients report every few hundred ms, so the report
        that says how far the user really got often lands just after the barge-in cut it."""
        reply = self._reply or self._cut_reply
        if reply is None:
            return
        self._playback_reports += 1
        reply.report_playback(played_ms)
        if reply is self._cut_reply:
            await self._recut(reply)

    async def _recut(self, reply: TurnReply) -> None:
        """The cut reply's turn in the history (the newest one), cut again to what the user has
        heard by now, unless a newer turn has come meanwhile (its cut is final then)."""
        if self._last_reply_ids is None:
            return
        index = self._last_reply_at
        kept = await self._engine.prepare_turn(HeardReply(self._last_reply_ids, reply.heard_s()))
        if self._cut_reply is reply:
            self.history.replace(index, kept)

    async def truncate(self, audio_end_ms: int) -> None:
        """Keep only the first `audio_end_ms` of the last reply. Raises ProtocolError."""
        if self._answering or self._last_reply_ids is None:
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "nothing to truncate: only the last finished reply can be truncated",
            )
        index = self._last_reply_at  # held user turns may follow it
        cut = HeardReply(self._last_reply_ids, audio_end_ms / 1000 * self._last_reply_speed)
        self.history.replace(index, await self._engine.prepare_turn(cut))
        self._cut_reply = None  # the client said where it ends: later reports do not move it
        self._emit.event(Truncated(audio_end_ms))

    async def forget(self, event: ForgetTurn) -> None:
        """Take a turn out of the conversation (OpenAI conversation.item.delete): in the
        history, the model's erased turn takes its place (an empty message of its role, so the
        turns still alternate) and the next reply prefills from there; still waiting in the
        queue, it is dropped unanswered. A turn being prepared or answered now is refused; an
        id the conversation never kept (a turn the model refused) is forgotten as it is."""
        turn_id = event.turn_id
        index = self.history.index_of(turn_id)
        if index is not None:
            if index == self._last_reply_at:  # nothing of it to truncate or cut again
                self._last_reply_ids, self._cut_reply = None, None
            erased = await self._engine.prepare_turn(ErasedTurn(self.history[index]))
            self.history.replace(index, erased)
        elif turn_id in self._being_answered():
            raise ProtocolError(
                ErrorCode.BAD_FIELD,
                "the turn is being answered: cancel the response (response.cancel) or wait for "
                "its response.done, then delete it",
                "item_id",
            )
        else:
            for queued in [t for t in self._queue if _id_of(t) == turn_id]:
                self._queue.remove(queued)
        self._emit.event(TurnForgotten(turn_id))

    def _being_answered(self) -> tuple[str | None, ...]:
        """The ids of the turn being prepared or answered and of its reply, neither in the
        history yet (a speculative turn gets its id when it is confirmed, mid-reply)."""
        current = None if self._current is None else _id_of(self._current)
        return (current, None if self._reply is None else self._reply.response_id)

    async def end(self, timeout_s: float) -> None:
        """`session.end`: turns still waiting are dropped, the reply playing is cancelled, and
        its `response.done` is out before this returns (or `timeout_s` passes)."""
        self._drop_speculation()
        self._queue.clear()
        self.cancel()
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            self._log.warning("the reply did not end within %.1f s", timeout_s)

    def stop(self) -> None:
        """The session is going away: free the engine's request and the conversation's KV.
        (The session cancels the player task itself.)"""
        self._drop_speculation()
        if self._reply is not None:
            self._reply.cancel()
        for task in self._transcripts:
            task.cancel()
        self._engine.end_conversation(self._conversation_id)

    @property
    def _answers_turns(self) -> bool:
        """Whether a finished user turn is answered at once, else held for AnswerTurns: with
        VAD by `create_response`; with turn detection off too, where the Realtime API's commit
        never starts a response (the native protocol's `input.commit` answers the turn)."""
        return self._detection.create_response

    @property
    def _speech_interrupts(self) -> bool:
        """Whether the user speaking cuts the reply playing (barge-in)."""
        return self._detection.interrupt_response

    def _on_input(self, event) -> None:
        if isinstance(event, TurnPaused):
            if self._answers_turns:  # a held turn gets no reply to begin early
                self._speculate(event.turn)
            return
        if isinstance(event, TurnResumed):
            self._drop_speculation()
            return
        if isinstance(event, UserAudioTurn):
            answered = self._answers_turns
            event = dataclasses.replace(event, turn_id=f"turn_{uuid.uuid4().hex[:16]}")
            self._emit.event(InputCommitted(event.audio_ms, answered, event.turn_id))
            self._transcribe(event)
            speculation, self._speculation = self._speculation, None
            if speculation is not None and speculation.pending:
                self._metrics.speculative_turns.labels("confirmed").inc()
                # Its reply answers the turn: out after the events above.
                speculation.confirm(event.turn_id)
                return
            self._enqueue(event if answered else HeldTurn(event))
            return
        self._emit.event(event)
        if isinstance(event, SpeechStarted) and self._speech_interrupts:
            self.cancel()

    def _transcribe(self, turn: UserAudioTurn) -> None:
        """The turn's transcript, where the session asked for them: made beside the reply,
        sent when done (InputTranscript)."""
        asked = self.options.input_transcription
        if asked is None or self._transcriber is None:
            return
        # Transcriptions run in parallel on the transcriber's workers; a session's are sent in
        # the order of its turns (the native event names no turn: clients match them in order).
        ahead = self._last_transcript
        task = asyncio.create_task(self._send_transcript(self._transcriber, turn, asked, ahead))
        self._last_transcript = task
        self._transcripts.add(task)
        task.add_done_callback(self._transcripts.discard)

    async def _send_transcript(
        self,
        transcriber: InputTranscriber,
        turn: UserAudioTurn,
        asked: InputTranscription,
        ahead: asyncio.Task | None,
    ) -> None:
        try:
            event = InputTranscript(
                await transcriber.transcribe(turn.pcm, asked), turn_id=turn.turn_id
            )
        except Exception as exc:  # the model's failure is this transcript's, not the session's
            self._log.warning("transcribing turn %s failed: %s", turn.turn_id, exc)
            event = InputTranscript(error=str(exc), turn_id=turn.turn_id)
        if ahead is not None:
            await asyncio.wait([ahead])  # sent (or cancelled with the session) first
        self._emit.event(event)

    def _speculate(self, turn: UserAudioTurn) -> None:
        """Begin answering the turn so far, held back until its end is confirmed; not while
        the queue is full (the turn waits for its end then, as without speculation)."""
        self._drop_speculation()
        if len(self._queue) >= self._settings.max_queued_responses:
            return
        # The pause is speculative_turn_ms of silence; the turn ends at silence_ms of it.
        confirm_in_ms = max(self._detection.silence_ms - self._settings.speculative_turn_ms, 0)
        self._speculation = SpeculativeTurn(turn, self._emit, confirm_in_ms / 1000)
        self._enqueue(self._speculation)

    def _drop_speculation(self) -> None:
        """The user spoke on (or the input was cleared, or the session ends): the reply begun
        at the pause is cancelled and nothing of it is sent or kept."""
        speculation, self._speculation = self._speculation, None
        if speculation is None or not speculation.pending:
            return
        self._metrics.speculative_turns.labels("discarded").inc()
        speculation.discard()
        with contextlib.suppress(ValueError):
            self._queue.remove(speculation)

    def _enqueue(self, turn: QueuedTurn) -> None:
        if len(self._queue) >= self._settings.max_queued_responses:
            raise ProtocolError(
                ErrorCode.RATE_LIMITED,
                f"at most {self._settings.max_queued_responses} turns may wait for an answer",
            )
        self._queue.append(turn)
        self._ready.set()

    # --- the player task -------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            turn = self._queue.popleft()
            self._answering, self._interrupted = True, False
            self._current = turn
            self._idle.clear()
            try:
                await self._answer(turn)
            finally:
                self._answering, self._reply, self._current = False, None, None
                self.last_played = time.monotonic()
                self._idle.set()

    async def _answer(self, turn: QueuedTurn) -> None:
        if isinstance(turn, ToolCall):
            await self._add_model_turn(TurnFromToolCall(turn.name, turn.arguments), turn.turn_id)
            return
        if isinstance(turn, AssistantMessage):
            await self._add_model_turn(ReplyFromText(turn.text), turn.turn_id)
            return
        if isinstance(turn, AnswerTurns):
            await self._answer_held(turn)
            return
        speculation = turn if isinstance(turn, SpeculativeTurn) else None
        if speculation is not None and speculation.decision is Decision.DISCARDED:
            return  # the user spoke on while it waited
        try:
            tools = await self._tools_turn()
            user = await self._engine.prepare_turn(self._turn_command(turn))
        except ModelInputError as exc:
            if speculation is not None and speculation.pending:
                # The turn so far is refused (too short, say): answered anew once it ends.
                self._metrics.speculative_turns.labels("unprepared").inc()
                speculation.unprepared()
                return
            self._emit.event(ErrorEvent(ErrorCode.BAD_FIELD, str(exc)))
            return
        await self._held.close()
        if isinstance(turn, HeldTurn) or (isinstance(turn, TextTurn) and not turn.answered):
            self._cut_reply = None  # a newer turn follows the cut reply: its cut is final
            await self._held.hold(user, _id_of(turn))
            return
        if speculation is None:
            self._cut_reply = None
            self.history.append(user, _id_of(turn))
            spoke_on = self._input is not None and self._input.in_speech and self._speech_interrupts
            if self._interrupted or spoke_on:
                # The user went on talking before the reply began: no reply to this turn; the
                # next one answers the whole of it.
                await self._keep_reply((), 0.0)
                return
        elif speculation.decision is Decision.DISCARDED:
            return
        overrides = turn.overrides if isinstance(turn, TextTurn | ToolOutputs) else None
        await self._run_reply(tools, speculation, user, overrides)

    def _turn_command(
        self, turn: QueuedTurn
    ) -> TurnFromSpeech | TurnFromToolOutputs | TurnFromText:
        """The engine's command that makes the model's user turn of a queued one."""
        if isinstance(turn, HeldTurn | UserAudioTurn | SpeculativeTurn):
            # The speech tokenizer is model work: the engine runs it, off the event loop.
            # The session's instructions (Realtime) ride along as the system prompt.
            audio = turn if isinstance(turn, UserAudioTurn) else turn.turn
            return TurnFromSpeech(audio.pcm, self._system(None))
        if isinstance(turn, ToolOutputs):
            return TurnFromToolOutputs(turn.outputs)
        assert isinstance(turn, TextTurn)
        return TurnFromText(turn.text, self._system(turn.overrides))

    def _system(self, overrides: ResponseOverrides | None) -> str | None:
        """The system prompt a user turn carries (models with ModelFacts.system_prompt; None:
        the one in force): the session's instructions, or the response's own. A turn's system
        prompt holds from it on, so once a response had its own, every later turn names the
        session's ("": the model's default) to have them back."""
        own = overrides.instructions if overrides is not None else None
        if own is not None:
            self._steered = True
            return own
        session = self.options.instructions
        return "" if session is None and self._steered else session

    async def _answer_held(self, ask: AnswerTurns) -> None:
        """The client asks for the reply to the held user turns: the history as it stands."""
        if not self._held.waiting:
            self._emit.event(self._held.nothing_waiting(ask.event_id))
            return
        try:
            tools = await self._tools_turn()
        except ModelInputError as exc:
            self._emit.event(ErrorEvent(ErrorCode.BAD_FIELD, str(exc)))
            return
        await self._run_reply(tools, overrides=ask.overrides)

    async def _run_reply(
        self,
        tools: tuple[Any, ...],
        speculation: SpeculativeTurn | None = None,
        user: Any = None,
        overrides: ResponseOverrides | None = None,
    ) -> None:
        """One reply to the history (and, speculating, to `user`, not in the history yet),
        with the session's options or, for this reply only, `overrides` laid over them."""
        reply = TurnReply(
            f"resp_{uuid.uuid4().hex[:16]}",
            self._engine,
            self._settings,
            self.options if overrides is None else overrides.over(self.options),
            self._emit if speculation is None else speculation.emitter,
            self._metrics,
            self._open_encoder,
            self._log,
            echo=overrides.echo if overrides is not None else None,
        )
        self._reply = reply
        # The tools lead the turns: the model writes them where its format lists tools (before
        # the history), so a change of tools re-prefills the conversation from there. A
        # speculative turn joins the history only once confirmed.
        turns = (*tools, *self.history) if speculation is None else (*tools, *self.history, user)
        if speculation is not None:
            speculation.reply = reply
        audible_at = None if speculation is None else speculation.confirm_due
        outcome = await reply.run(turns, self._conversation_id, audible_at)
        if speculation is not None:
            await speculation.decided.wait()  # a reply done before the turn was waits for it
            if speculation.decision is Decision.DISCARDED:
                return  # nothing of it was sent, nothing of it is kept
            self._cut_reply = None
            self.history.append(user, speculation.turn_id)
        self.replies += 1
        self._last_reply_speed = self.options.speed
        self.reused_tokens.append(outcome.reused_tokens)
        # An engine that died with the reply makes no cut: done() says so, and the session ends.
        with contextlib.suppress(EngineDead):
            await self._keep(reply, outcome)
        heard = "all" if outcome.heard_s is None else f"{outcome.heard_s:.2f}s"
        reply.done(f"tokens={len(outcome.output_ids)} heard={heard} reused={outcome.reused_tokens}")

    async def _add_model_turn(
        self, command: TurnFromToolCall | ReplyFromText, turn_id: str | None
    ) -> None:
        """A client's call, or words it puts in the model's mouth, join the history as the
        model's turn; nothing is answered."""
        try:
            kept = await self._engine.prepare_turn(command)
        except ModelInputError as exc:
            self._emit.event(ErrorEvent(ErrorCode.BAD_FIELD, str(exc)))
            return
        self.history.append(kept, turn_id)
        self._held.answered()  # the model's turn after any held ones
        # The newest turn is no reply now: there is none to truncate or recut.
        self._last_reply_ids, self._cut_reply = None, None

    async def _tools_turn(self) -> tuple[Any, ...]:
        """The model's tools element for the session's tools ((): none), made once per set.
        Raises ModelInputError (the model refuses them)."""
        tools = self.options.tools
        if not tools:
            return ()
        if self._tools is None or self._tools[0] != tools:
            self._tools = (tools, await self._engine.prepare_turn(ToolsTurn(tools)))
        return (self._tools[1],)

    async def _keep(self, reply: TurnReply, outcome: ReplyOutcome) -> None:
        """The reply into the history, cut to what the user heard; and its transcript, when
        the engine streamed none."""
        reports = self._playback_reports
        await self._keep_reply(outcome.output_ids, outcome.heard_s, reply.response_id)
        self._cut_reply = reply if outcome.heard_s is not None else None
        if self._cut_reply is reply and self._playback_reports != reports:
            await self._recut(reply)  # a report came while the engine made the cut
        if not outcome.streamed_text:
            transcript = ReplyTranscript(outcome.output_ids, outcome.heard_s)
            text = await self._engine.prepare_turn(transcript)
            if text:
                self._emit.event(TranscriptDelta(reply.response_id, text))

    async def _keep_reply(
        self, output_ids: tuple, heard_s: float | None, response_id: str | None = None
    ) -> None:
        kept = await self._engine.prepare_turn(HeardReply(tuple(output_ids), heard_s))
        self.history.append(kept, response_id)
        self._held.answered()
        self._last_reply_ids, self._last_reply_at = tuple(output_ids), len(self.history) - 1
        return kept


def _id_of(turn: QueuedTurn) -> str | None:
    """The id a queued turn joins the history under (None: one nobody can name)."""
    if isinstance(turn, UserAudioTurn):
        return turn.turn_id
    if isinstance(turn, HeldTurn):
        return turn.turn.turn_id
    if isinstance(turn, SpeculativeTurn):
        return turn.turn_id or None
    if isinstance(turn, TextTurn | ToolOutputs | ToolCall | AssistantMessage):
        return turn.turn_id
    return None
