"""voxgate.client.sync.SyncSession has the async Session's whole public API, blocking."""

from __future__ import annotations

from voxgate.client.session import Session
from voxgate.client.sync import SyncSession
from voxgate.client.sync import connect as connect_sync


def public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_sync_session_has_every_public_name_of_session():
    assert public_names(Session) - public_names(SyncSession) == set()
    # `info` is an instance attribute of Session, so dir(Session) does not list it.
    assert public_names(SyncSession) - public_names(Session) == {"info"}


def test_the_blocking_wrappers_send_and_report_the_close(server):
    with connect_sync(server.url, sampling={"temperature": 0.0, "max_tokens": 30}) as session:
        assert not session.closed and session.close_code is None
        session.send_event({"type": "text", "text": "Hello there.", "final": True})
        assert session.next_reply().status == "length"
        assert session.flush_audio() == 0  # no microphone audio held back
        assert session.end() == "client_ended"
        assert session.closed and session.close_code == 1000
