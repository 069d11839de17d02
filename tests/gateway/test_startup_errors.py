"""`voxgate serve` start-up errors an operator can fix, each one line (gateway/startup.py,
models/loader.py): a --host that does not resolve, a mistyped preset, weights it cannot read."""

from __future__ import annotations

import socket

from gateway.config import GatewaySettings
from gateway.startup import explain, listen_host
from tests.gateway.test_startup import assert_one_line, serve


def test_a_host_that_does_not_resolve_is_one_line():
    result = serve("--model", "tiny-orpheus", "--port", "8877", "--host", "foo.invalid")
    line = assert_one_line(result, "cannot resolve --host foo.invalid", "address of this machine")
    assert "engine ready" not in result.stderr  # refused before loading anything
    assert line.count("\n") == 0
    unresolved = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert explain(unresolved, GatewaySettings(host="x.invalid", port=1)) == (
        "cannot resolve --host x.invalid: Name or service not known; give an address of this "
        "machine or a name it resolves"
    )


def test_a_bracketed_ipv6_host_is_the_address_inside():
    assert listen_host("[::]") == "::" and listen_host("[::1]") == "::1"
    assert listen_host("0.0.0.0") == "0.0.0.0" and listen_host("::") == "::"
