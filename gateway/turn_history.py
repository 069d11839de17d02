"""A turn-based conversation's history: the model's own turn objects, in order, each with the id
the client's protocol knows it by, so that a turn can be found and taken out again
(gateway.wire's ForgetTurn: the Realtime API's conversation.item.delete).

Ids: a spoken user turn's is given at its commit (InputCommitted carries it), a reply's is its
response id, a typed turn's, a tool's results' and a client's call's come from the adapter that
sent them; a turn nobody can name (the empty reply that keeps held turns alternating, a native
text turn) has none.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload


class TurnHistory(Sequence[Any]):
    """A sequence of the model's turn objects (what SpeechRequest.turns takes), appended to and
    replaced in place; a turn keeps its id when it is replaced (a reply cut to what was heard,
    an erased turn)."""

    def __init__(self) -> None:
        self._turns: list[Any] = []
        self._ids: list[str | None] = []

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self._turns[index]

    def __len__(self) -> int:
        return len(self._turns)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._turns)

    def __repr__(self) -> str:
        return f"TurnHistory({list(zip(self._ids, self._turns, strict=True))!r})"

    def append(self, turn: Any, turn_id: str | None = None) -> None:
        self._turns.append(turn)
        self._ids.append(turn_id)

    def replace(self, index: int, turn: Any) -> None:
        """The turn at `index` becomes `turn`, under the same id."""
        self._turns[index] = turn

    def index_of(self, turn_id: str) -> int | None:
        """Where the turn with this id is, or None (not in the history)."""
        try:
            return self._ids.index(turn_id)
        except ValueError:
            return None
