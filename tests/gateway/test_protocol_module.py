"""web_demo/protocol.js, the protocol's ES module for web apps, names the same vocabulary as the
server (gateway/protocol_codes.py): an event type, error code, status or close code added to
one and not the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.protocol import ClientEventType, CloseCode, ErrorCode, ResponseStatus, ServerEventType

MODULE = Path(__file__).resolve().parents[2] / "web_demo" / "protocol.js"


def frozen(name: str) -> dict[str, str]:
    """`export const NAME = Object.freeze({ KEY: "value", ... })` → {KEY: value}."""
    source = MODULE.read_text(encoding="utf-8")
    match = re.search(rf"export const {name} = Object\.freeze\(\{{(.*?)\}}\);", source, re.S)
    assert match, f"protocol.js lost its export {name}"
    return dict(re.findall(r"(\w+): \"([^\"]*)\"", match.group(1)))


@pytest.mark.parametrize(
    "name, vocabulary",
    [
        ("C", ClientEventType),
        ("S", ServerEventType),
        ("ERROR", ErrorCode),
        ("STATUS", ResponseStatus),
    ],
)
def test_the_module_names_the_servers_vocabulary(name, vocabulary):
    assert sorted(frozen(name).values()) == sorted(v.value for v in vocabulary)


def test_every_close_code_is_described():
    source = MODULE.read_text(encoding="utf-8")
    described = {int(n) for n in re.findall(r"^\s+(1\d{3}): \"", source, re.M)}
    assert {int(c) for c in CloseCode} <= described


def test_every_export_is_documented():
    """Each export follows a JSDoc block (a one-line one for a constant)."""
    lines = MODULE.read_text(encoding="utf-8").splitlines()
    bare = [
        line
        for i, line in enumerate(lines)
        if line.startswith("export ") and not lines[i - 1].rstrip().endswith("*/")
    ]
    assert not bare, f"exports without JSDoc: {bare}"
