"""The Realtime wire takes the server's own limits (`--max-text-chars`, the frame size), not
the defaults: a long message is refused by the limit the server was started with."""

from __future__ import annotations

from types import SimpleNamespace

from gateway.app import Gateway
from gateway.config import GatewaySettings


def test_the_realtime_wire_gets_the_servers_limits():
    settings = GatewaySettings(max_text_chars=100, max_frame_bytes=4096)
    engine = SimpleNamespace(facts=SimpleNamespace())
    ws = SimpleNamespace(scope={"subprotocols": []}, headers={}, query_params={})
    gateway = Gateway.__new__(Gateway)
    gateway.settings = settings
    wire = gateway._realtime_wire(ws, engine)
    inbound = wire._inbound
    assert (inbound._max_text_chars, inbound._max_frame_bytes) == (100, 4096)
