"""What both directions of one `/v1/realtime` connection share (gateway.realtime): the audio
formats the Realtime API names, and the conversation's bookkeeping that client events
(gateway.realtime_inbound) and session events (gateway.realtime_outbound) both read and write.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.api import ModelFacts
from gateway.protocol import AudioFormat, AudioSpec, TurnDetection
from gateway.realtime_calls import SessionTools
from gateway.realtime_events import shown_item
from gateway.realtime_protocol import Dialect, RealtimeFormat
from gateway.vad import VadSettings

_FRAME_MS = 20
SPECS: Mapping[RealtimeFormat, AudioSpec] = {
    RealtimeFormat.PCM16: AudioSpec(AudioFormat.PCM16, 24000, _FRAME_MS),
    RealtimeFormat.G711_ULAW: AudioSpec(AudioFormat.MULAW, 8000, _FRAME_MS),
    RealtimeFormat.G711_ALAW: AudioSpec(AudioFormat.ALAW, 8000, _FRAME_MS),
}
FORMAT_OF = {spec.format: fmt for fmt, spec in SPECS.items()}


@dataclass(frozen=True)
class ResponseEcho:
    """What a response.create's response carries through the session and gets back in its
    ResponseStarted (ResponseOverrides.echo): the client's `metadata`, and the text messages
    it speaks, which delete refuses until that response's own response.done (other
    responses may be queued behind it)."""

    metadata: dict | None = None
    items: tuple[str, ...] = ()


PREFIX_PADDING_MS = VadSettings().prefix_ms  # a turn's audio starts this long before the speech


def server_vad_view(detection: TurnDetection) -> dict:
    """The server's VAD as the Realtime API shows it: the silence that ends a turn, the audio
    kept before the speech, whether the server answers each turn and whether speech during a
    response interrupts it."""
    return {
        "type": "server_vad",
        "silence_duration_ms": detection.silence_ms,
        "prefix_padding_ms": PREFIX_PADDING_MS,
        "create_response": detection.create_response,
        "interrupt_response": detection.interrupt_response,
    }


SERVER_VAD = server_vad_view(TurnDetection())  # what a session starts with


# The most items a connection remembers for conversation.item.retrieve / .delete; the oldest
# is forgotten first, so a long call's memory stays bounded (each item is its text, at most
# a response's worth).
MAX_ITEMS = 256


class ConversationItems:
    """The conversation's items as the client was last shown them, by id: the newest
    MAX_ITEMS, in the order they were created. Audio is not kept (the items the server sends
    carry none: audio parts have their transcript only)."""

    def __init__(self, limit: int = MAX_ITEMS) -> None:
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._limit = limit

    def note(self, text: str) -> None:
        """A server event on its way to the client: the item it shows (gateway.realtime_events'
        `shown_item`; most events show none) is remembered as shown, in its place if an
        earlier event showed it."""
        item = shown_item(text)
        if item is None or not isinstance(item.get("id"), str):
            return
        self._items[item["id"]] = item
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, item_id: str) -> dict | None:
        return self._items.get(item_id)

    def forget(self, item_id: str) -> None:
        self._items.pop(item_id, None)

    def transcribed(self, item_id: str, transcript: str) -> None:
        """A spoken user item's transcript came: retrieve shows it from now on."""
        item = self._items.get(item_id)
        if item is not None and item.get("content"):
            item["content"][0]["transcript"] = transcript

    @property
    def newest(self) -> str | None:
        return next(reversed(self._items), None)


class TurnItems:
    """Turn-based models: which of the model's turns (gateway.turn_history's ids) each item is
    part of, for conversation.item.delete. A turn may hold several items (the text messages
    one response.create answered, a reply and its function calls). The newest MAX_ITEMS."""

    def __init__(self, limit: int = MAX_ITEMS) -> None:
        self._turn_of: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def add(self, item_id: str, turn_id: str) -> None:
        self._turn_of[item_id] = turn_id
        while len(self._turn_of) > self._limit:
            self._turn_of.popitem(last=False)

    def turn_of(self, item_id: str) -> str | None:
        return self._turn_of.get(item_id)

    def items_of(self, turn_id: str) -> list[str]:
        """The turn's items, in the order they were added."""
        return [item for item, turn in self._turn_of.items() if turn == turn_id]

    def take(self, turn_id: str) -> list[str]:
        """The turn's items, in the order they were added; forgotten here."""
        items = self.items_of(turn_id)
        for item in items:
            del self._turn_of[item]
        return items


@dataclass
class RealtimeState:
    dialect: Dialect
    facts: ModelFacts
    # Function calling (models whose facts name a tool_call_syntax).
    tools: SessionTools
    last_item_id: str | None = None  # the newest item: the next one's previous_item_id
    last_reply_item: str | None = None  # the last assistant item, for truncate
    truncating: str | None = None  # the item a truncate was sent for, until it is done
    # An audio turn was committed and is being answered (server VAD with create_response
    # true, which also answers a turn an input_audio_buffer.commit ends): a response.create
    # that follows, as clients send after a commit, asks for that answer. Cleared by that
    # response.create, or once the answer is done: a response.create after it asks anew.
    audio_turn_answered: bool = False
    # The session's output format, as session.created / session.updated last showed it.
    output_format: RealtimeFormat = RealtimeFormat.PCM16
    event_id: str | None = None  # the client event being handled, for its errors
    items: ConversationItems = field(default_factory=ConversationItems)
    turn_items: TurnItems = field(default_factory=TurnItems)  # turn-based models
    # The items of the responses asked for and not yet done: the text messages each
    # response.create took and each response's output item, from response.create (or
    # response.started) until that response's response.done.
    answering: set[str] = field(default_factory=set)
