"""Twilio's request signatures (X-Twilio-Signature), so that a server can accept calls from
Twilio — which cannot send an API key — and nobody else.

Twilio signs every request it makes, the Media Streams WebSocket handshake included: base64 of
HMAC-SHA1, keyed with the account's auth token, over the full URL it called (scheme, host,
path, query) followed by each POST form parameter, sorted by name, as name + value with no
separators (https://www.twilio.com/docs/usage/webhooks/webhooks-security).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

SIGNATURE_HEADER = "x-twilio-signature"


def twilio_signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    data = url + "".join(name + params[name] for name in sorted(params or {}))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def is_valid_twilio_signature(
    auth_token: str, signature: str | None, url: str, params: Mapping[str, str] | None = None
) -> bool:
    if not signature:
        return False
    expected = twilio_signature(auth_token, url, params)
    return hmac.compare_digest(expected.encode(), signature.encode())


def public_url(scheme: str, netloc: str, path: str, query: str, public_base: str | None) -> str:
    """The URL Twilio called: behind a TLS-terminating proxy the server sees ws/http and an
    inner host, so `public_base` (e.g. https://voice.example.com) replaces scheme and host."""
    base = public_base.rstrip("/") if public_base else f"{scheme}://{netloc}"
    return base + path + (f"?{query}" if query else "")
