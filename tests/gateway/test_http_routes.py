"""/health, /ready, /metrics, the web demo at /, wrong methods and unknown API paths, and the app
building its own engine."""

from __future__ import annotations

import httpx
import websockets
from gateway_testkit import collect_response, send, start_session
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.config import GatewaySettings


async def test_health_ready_and_metrics(server):
    async with websockets.connect(server.url) as ws:
        await start_session(ws)
        await send(ws, type="text", text="Count me in the metrics.")
        await collect_response(ws)
    async with httpx.AsyncClient(base_url=server.http) as client:
        assert (await client.get("/health")).json() == {"status": "ok"}
        ready = await client.get("/ready")
        assert ready.status_code == 200 and ready.json()["model"] == "tiny-orpheus"
        metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for name in [
        "voxgate_sessions ",
        'voxgate_responses_total{status="length"}',
        "voxgate_ttfa_seconds_bucket",
        "voxgate_underruns_total",
        "voxgate_audio_sent_seconds_total",
        "voxgate_engine_kv_blocks_used",
        "voxgate_engine_kv_blocks_total",
        "voxgate_engine_step_seconds",
        "voxgate_engine_batch_size",
        "voxgate_engine_steps_total",
        'voxgate_gc_pause_seconds_count{generation="2"}',
        "voxgate_engine_realtime_room ",
        "voxgate_engine_realtime_streams ",
        "voxgate_engine_realtime_capacity_streams ",
        "voxgate_engine_turn_fixed_seconds ",
        "voxgate_engine_turn_row_seconds ",
        "voxgate_engine_listeners_short ",
        'voxgate_gateway_admission_refusals_total{cause="listeners"} ',
    ]:
        assert name in text, name


async def test_web_demo_is_served_at_root(server):
    async with httpx.AsyncClient(base_url=server.http) as client:
        page = await client.get("/")
        health = await client.get("/health")  # the static mount does not shadow the routes
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "<html" in page.text.lower()
    assert health.json() == {"status": "ok"}


async def test_a_wrong_method_on_an_api_route_is_405_with_allow(server):
    """The web demo's files at / do not swallow a known route asked with the wrong method."""
    async with httpx.AsyncClient(base_url=server.http) as client:
        speech = await client.get("/v1/audio/speech")
        voices = await client.put("/v1/voices")
        health = await client.post("/health")
    assert speech.status_code == 405 and speech.headers["allow"] == "POST"
    error = speech.json()["error"]
    assert error["code"] == "method_not_allowed" and "POST /v1/audio/speech" in error["message"]
    # Two routes share /v1/voices: Allow names the methods of both.
    assert voices.status_code == 405 and voices.headers["allow"] == "GET, HEAD, POST"
    assert health.status_code == 405 and health.headers["allow"] == "GET, HEAD"


async def test_an_unknown_api_path_is_a_json_404_naming_the_routes(server):
    async with httpx.AsyncClient(base_url=server.http) as client:
        missing = await client.get("/v1/audio/speach")
        asset = await client.get("/app.js")  # the demo's files are still served
        no_file = await client.get("/nothing-here.js")
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert error["code"] == "not_found" and "/v1/audio/speach" in error["message"]
    assert "POST /v1/audio/speech" in error["message"] and "GET /v1/voices" in error["message"]
    assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
    assert no_file.status_code == 404


def test_api_routes_answer_405_and_404_without_the_web_demo(tmp_path, engine):
    app = create_app(GatewaySettings(web_demo_dir=tmp_path / "nowhere"), engine=engine)
    with TestClient(app) as client:
        speech = client.get("/v1/audio/speech")
        missing = client.get("/v1/nowhere")
    assert speech.status_code == 405 and speech.headers["allow"] == "POST"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_missing_web_demo_folder_serves_a_note(tmp_path, engine):
    app = create_app(GatewaySettings(web_demo_dir=tmp_path / "nowhere"), engine=engine)
    with TestClient(app) as client:
        page = client.get("/")
    assert page.status_code == 200 and "/v1/stream" in page.text


def test_lifespan_builds_and_stops_its_own_engine():
    settings = GatewaySettings(model="tiny-orpheus")
    app = create_app(settings)
    with TestClient(app) as client:
        assert client.get("/ready").status_code == 200
        engine = app.state.gateway.engine
        assert engine is not None and engine.ready
    assert not engine.ready  # shut down with the app
