"""docs/protocol.md names the whole wire vocabulary the code defines (gateway/protocol_codes.py),
each in the section where a client author looks for it, so that the spec and the server cannot
drift apart: a new event type, error code, status or close code must be documented to pass."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.protocol import (
    SUBPROTOCOL,
    ClientEventType,
    CloseCode,
    EndReason,
    ErrorCode,
    ModelKind,
    ResponseStatus,
    ServerEventType,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def sections(text: str) -> dict[str, str]:
    """`## Heading` → the text under it, up to the next `## ` heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.fixture(scope="module")
def doc() -> dict[str, str]:
    found = sections(DOC.read_text(encoding="utf-8"))
    expected = {
        "Connection",
        "Client → server",
        "Server → client",
        "Close codes",
        "Timing guarantees the server aims for",
        "Optional extensions",
    }
    assert expected <= found.keys(), f"docs/protocol.md lost sections: {expected - found.keys()}"
    return found


def backticked(body: str) -> set[str]:
    return set(re.findall(r"`([^`\n]+)`", body))


def table_types(body: str) -> set[str]:
    """The backticked names in the first column of a section's table."""
    rows = re.findall(r"^\| (.+?) \|", body, flags=re.MULTILINE)
    return set().union(*(backticked(row) for row in rows))


def test_every_client_event_type_is_in_the_client_table(doc):
    named = table_types(doc["Client → server"])
    missing = [t.value for t in ClientEventType if t.value not in named]
    assert not missing, f"docs/protocol.md, 'Client → server' table, lacks rows for {missing}"


def test_every_server_event_type_is_in_the_server_table(doc):
    named = table_types(doc["Server → client"])
    missing = [t.value for t in ServerEventType if t.value not in named]
    assert not missing, f"docs/protocol.md, 'Server → client' table, lacks rows for {missing}"


def test_every_error_code_and_response_status_is_in_the_server_section(doc):
    named = backticked(doc["Server → client"])
    missing = [c.value for c in (*ErrorCode, *ResponseStatus) if c.value not in named]
    assert not missing, f"docs/protocol.md, 'Server → client', does not name {missing}"


def test_every_close_code_is_in_the_close_codes_section(doc):
    numbers = {int(n) for n in re.findall(r"\b(1\d{3})\b", doc["Close codes"])}
    missing = [int(c) for c in CloseCode if int(c) not in numbers]
    assert not missing, f"docs/protocol.md, 'Close codes', does not list {missing}"


def test_the_extensions_name_every_value_the_server_adds(doc):
    named = backticked(doc["Optional extensions"])
    added = [*(r.value for r in EndReason), *(k.value for k in ModelKind), "token_rate_hz"]
    missing = [v for v in added if v not in named]
    assert not missing, f"docs/protocol.md, 'Optional extensions', does not name {missing}"
    assert f"`{SUBPROTOCOL}`" in doc["Connection"]


def test_the_checks_above_can_fail():
    """The section parser really separates sections: a value in the wrong section is not found."""
    text = "## Client → server\n`response.done`\n## Server → client\n| `text` | x |\n"
    found = sections(text)
    assert "response.done" not in table_types(found["Server → client"])
    assert "text" not in table_types(found["Client → server"])
    assert table_types(found["Server → client"]) == {"text"}


def test_readme_and_docs_link_the_protocol_inside_the_repository():
    root = DOC.parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    outside = [
        f"{page.relative_to(root)}: {link}"
        for page in pages
        for link in re.findall(r"\]\(([^)]+)\)", page.read_text(encoding="utf-8"))
        if "PROTOCOL.md" in link or link.startswith("../shared")
    ]
    assert not outside, f"links to a protocol outside the repository: {outside}"
    assert "(docs/protocol.md)" in (root / "README.md").read_text(encoding="utf-8")
