"""API keys (header and subprotocol), the Origin allow-list and the per-key session cap, over a
real handshake."""

from __future__ import annotations

import logging

import pytest
import websockets
from gateway_testkit import expect_close, send, start_session
from websockets.exceptions import InvalidStatus

from voxgate.client import AuthenticationError, HandshakeError, connect

KEYS = ("alpha-key-0001", "beta-key-0002")
ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def secured(make_server):
    return make_server(api_keys=KEYS, allowed_origins=(ORIGIN,), max_sessions_per_key=2)


def server_lines(caplog) -> list[str]:
    """Log lines of the server side (the client library logs its own handshake at DEBUG)."""
    return [r.getMessage() for r in caplog.records if not r.name.startswith("websockets.client")]


async def refused_status(url: str, **kwargs) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with websockets.connect(url, **kwargs):
            pass
    return info.value.response.status_code


async def session_works(ws) -> None:
    started = await start_session(ws)
    assert started["type"] == "session.started"
    await send(ws, type="session.end")
    code, _ = await expect_close(ws)
    assert code == 1000


async def test_header_key_accepted(secured):
    async with connect(secured.url, api_key=KEYS[0]) as session:  # Authorization: Bearer
        assert session.info.session_id
        assert await session.end() == "client_ended" and session.close_code == 1000


async def test_subprotocol_key_accepted_and_never_echoed(secured, caplog):
    caplog.set_level(logging.DEBUG)
    async with websockets.connect(
        secured.url, subprotocols=["voxgate.v1", f"bearer.{KEYS[1]}"]
    ) as ws:
        assert ws.subprotocol == "voxgate.v1"
        assert ws.response.headers["Sec-WebSocket-Protocol"] == "voxgate.v1"
        assert KEYS[1] not in str(ws.response.headers)
        await session_works(ws)
    assert all(KEYS[1] not in line for line in server_lines(caplog))
    assert any("key-1" in line for line in server_lines(caplog))  # named by position


async def test_missing_key_is_401(secured):
    assert await refused_status(secured.url) == 401
    assert await refused_status(secured.url, subprotocols=["voxgate.v1"]) == 401


async def test_wrong_key_is_403_both_ways(secured, caplog):
    caplog.set_level(logging.DEBUG)
    assert (
        await refused_status(secured.url, additional_headers={"Authorization": "Bearer guess-0001"})
        == 403
    )
    assert (
        await refused_status(secured.url, subprotocols=["voxgate.v1", "bearer.guess-0002"]) == 403
    )
    assert all("guess-000" not in line for line in server_lines(caplog))


async def test_origin_allow_list(secured):
    auth = {"Authorization": f"Bearer {KEYS[0]}"}
    assert (
        await refused_status(
            secured.url, additional_headers=auth, origin="https://evil.example.com"
        )
        == 403
    )
    async with websockets.connect(secured.url, additional_headers=auth, origin=ORIGIN) as ws:
        await session_works(ws)
    # Non-browser clients send no Origin at all; the allow-list is about other web pages.
    async with websockets.connect(secured.url, additional_headers=auth) as ws:
        await session_works(ws)


async def test_per_key_session_cap(secured):
    alpha = {"Authorization": f"Bearer {KEYS[0]}"}
    async with (
        websockets.connect(secured.url, additional_headers=alpha) as a1,
        websockets.connect(secured.url, additional_headers=alpha) as a2,
    ):
        await start_session(a1)
        await start_session(a2)
        async with websockets.connect(secured.url, additional_headers=alpha) as a3:
            code, messages = await expect_close(a3)
        assert code == 1008
        assert messages[0]["code"] == "rate_limited" and messages[0]["fatal"] is True
        # Another key is not affected.
        async with websockets.connect(
            secured.url, subprotocols=["voxgate.v1", f"bearer.{KEYS[1]}"]
        ) as b1:
            await session_works(b1)
    # Slots come back when sessions close.
    async with websockets.connect(secured.url, additional_headers=alpha) as again:
        await session_works(again)


async def test_open_server_needs_no_key(server):
    async with websockets.connect(server.url) as ws:
        await session_works(ws)


async def test_a_socket_to_no_endpoint_is_404_naming_the_endpoints(server):
    """A mistyped path is told apart from a refused key: HTTP 404 with the socket endpoints in
    its body (before, every unknown path was a bare 403, which the client read as a bad key)."""
    nowhere = server.url.replace("/v1/stream", "/v1/strem")
    with pytest.raises(InvalidStatus) as info:
        async with websockets.connect(nowhere):
            pass
    response = info.value.response
    assert response.status_code == 404
    assert b"/v1/stream" in response.body and b"/v1/realtime" in response.body
    with pytest.raises(HandshakeError) as refused:
        await connect(nowhere)
    assert refused.value.status == 404 and not isinstance(refused.value, AuthenticationError)
    assert "/v1/stream" in str(refused.value)
