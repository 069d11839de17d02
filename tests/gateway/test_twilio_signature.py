"""Twilio request signatures: the documented scheme, and a server that takes Twilio's signed
calls in place of API keys (Twilio cannot send one) while refusing everyone else."""

from __future__ import annotations

import httpx
import pytest
import websockets
from test_twilio import ACCOUNT_SID, CALL_SID, FakeTwilio, expect_close, fast

from gateway.twilio_signature import is_valid_twilio_signature, public_url, twilio_signature

TOKEN = "12345"


def test_signature_matches_twilios_documented_example():
    params = {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+12349013030",
        "Digits": "1234",
        "From": "+12349013030",
        "To": "+18005551212",
    }
    url = "https://mycompany.com/myapp.php?foo=1&bar=2"
    signature = twilio_signature(TOKEN, url, params)
    assert signature == "0/KCTR6DLpKmkAf8muzZqo1nDgQ="
    assert is_valid_twilio_signature(TOKEN, signature, url, params)
    assert not is_valid_twilio_signature(TOKEN, signature, url, {**params, "Digits": "1235"})
    assert not is_valid_twilio_signature("54321", signature, url, params)
    assert not is_valid_twilio_signature(TOKEN, None, url, params)


def test_public_url_replaces_scheme_and_host_only():
    assert public_url("ws", "10.0.0.5:8000", "/v1/twilio", "", "wss://voice.example.com/") == (
        "wss://voice.example.com/v1/twilio"
    )
    assert (
        public_url("http", "h:1", "/v1/twilio/twiml", "a=1", None)
        == "http://h:1/v1/twilio/twiml?a=1"
    )


@pytest.fixture(scope="module")
def signed_server(make_server):
    # API keys on: only Twilio's signature can open /v1/twilio.
    return make_server(api_keys=("k" * 32,), twilio_auth_token=TOKEN)


async def test_signed_stream_is_served_and_unsigned_ones_are_refused(signed_server):
    url = signed_server.url.replace("/v1/stream", "/v1/twilio")
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url):
            pass
    assert refused.value.response.status_code == 403
    forged = {"X-Twilio-Signature": twilio_signature("not-the-token", url)}
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(url, additional_headers=forged):
            pass
    signed = {"X-Twilio-Signature": twilio_signature(TOKEN, url)}
    async with websockets.connect(url, additional_headers=signed) as ws:
        twilio = FakeTwilio(ws)
        await twilio.open(**fast())
        assert (await twilio.recv())["event"] in ("media", "mark")
        await twilio.send("stop", stop={"accountSid": ACCOUNT_SID, "callSid": CALL_SID})
        code, _ = await expect_close(ws)
    assert code == 1000


def test_twiml_webhook_needs_twilios_signature_over_url_and_form(signed_server):
    url = signed_server.http + "/v1/twilio/twiml?greeting=Hello"
    form = {"CallSid": CALL_SID, "AccountSid": ACCOUNT_SID, "From": "+15550100"}
    assert httpx.post(url, data=form).status_code == 403
    signature = twilio_signature(TOKEN, url, form)
    reply = httpx.post(url, data=form, headers={"X-Twilio-Signature": signature})
    assert reply.status_code == 200 and "<Stream" in reply.text
    tampered = {**form, "From": "+15550199"}
    assert (
        httpx.post(url, data=tampered, headers={"X-Twilio-Signature": signature}).status_code == 403
    )
