"""The bench's once-a-second scrape of a server's /metrics (voxbench/metrics_sampler.py): each
reading keeps the engine loop's counters and admission's view from one scrape of the
gateway's own /metrics text, so a point's room can be read second by second."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest

from engine.outputs import AdmissionStats
from tests.gateway.test_admission_metrics import metrics_text
from voxbench.admission_view import describe_admission, room_by_second, turn_fit_by_second
from voxbench.metrics_sampler import MetricsSampler, parse_reading


def body_with_room(capacity: int) -> str:
    return metrics_text(AdmissionStats(streams=10, capacity_streams=capacity, live_turns=5))


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering /metrics with the last of `bodies` (503 while empty)."""
    bodies: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/metrics" or not bodies:
                self.send_error(503)
                return
            payload = bodies[-1].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()


def test_a_reading_keeps_the_loop_counters_and_the_admission_view_of_one_scrape():
    reading = parse_reading(1.5, body_with_room(42))
    assert reading.t == 1.5
    assert reading.loop is not None and "llm_s" in reading.loop
    assert reading.admission is not None and reading.admission["capacity_streams"] == 42.0
    assert parse_reading(1.0, "voxgate_engine_kv_blocks_used 37.0\n").kv_pages == 37.0
    assert reading.kv_pages == 0.0  # the gateway's own text: the gauge, no page in use
    assert parse_reading(1.0, "voxgate_engine_steps_total 3\n").kv_pages is None  # no gauge
    silent = parse_reading(2.0, None)  # the server did not answer
    assert silent.loop is None and silent.admission is None


def test_the_sampler_reads_at_start_through_the_point_and_at_stop(metrics_server):
    url, bodies = metrics_server
    bodies.append(body_with_room(90))
    sampler = MetricsSampler(url, period_s=0.05)
    time.sleep(0.2)  # a few periodic readings at the first room
    bodies.append(body_with_room(70))
    readings = sampler.stop()
    assert readings[0].t < 0.05 and readings[0].admission["capacity_streams"] == 90.0
    assert readings[-1].admission["capacity_streams"] == 70.0
    assert [r.t for r in readings] == sorted(r.t for r in readings)
    assert all(r.loop is not None for r in readings)


def test_a_server_gone_quiet_reads_as_nothing_not_an_error(metrics_server):
    url, _ = metrics_server  # answers 503 to everything
    readings = MetricsSampler(url, period_s=0.05).stop()
    assert len(readings) >= 2
    assert all(r.loop is None and r.admission is None for r in readings)


def test_room_by_second_and_its_log_line():
    readings = [
        (0.0, parse_reading(0.0, body_with_room(200)).admission),
        (0.6, parse_reading(0.6, body_with_room(180)).admission),  # the second's last wins
        (1.1, None),  # no answer that second
        (2.2, parse_reading(2.2, body_with_room(150)).admission),
    ]
    room = room_by_second(readings)
    assert room == {0: 180, 2: 150}
    view = {
        **readings[-1][1],
        "refusals": {},
        "gateway_refusals": {},
        "room_by_second": {str(s): n for s, n in room.items()},
    }
    lines = describe_admission(view)
    assert lines[-1] == "admission room by second of the point: 0s:180 2s:150"


def test_the_turn_fit_admission_judged_by_is_read_each_second():
    def body(fixed_s: float, per_row_s: float) -> str:
        stats = AdmissionStats(
            streams=10,
            capacity_streams=100,
            live_turns=5,
            turn_fixed_s=fixed_s,
            turn_per_row_s=per_row_s,
        )
        return metrics_text(stats)

    readings = [
        (0.2, parse_reading(0.2, body(0.003, 2.2e-5)).admission),
        (1.4, None),
        (2.5, parse_reading(2.5, body(0.0, 0.0)).admission),  # not fitted (yet): left out
        (3.1, parse_reading(3.1, body(0.00275, 8.7e-6)).admission),
    ]
    fits = turn_fit_by_second(readings)
    assert fits == {0: (3.0, 0.022), 3: (2.75, 0.0087)}
    view = {
        **readings[-1][1],
        "refusals": {},
        "gateway_refusals": {},
        "turn_fit_by_second": {str(s): list(f) for s, f in fits.items()},
    }
    assert describe_admission(view)[-1] == (
        "admission turn fit by second (ms + ms/row [+ µs/page]): 0s:3+0.022 3s:2.75+0.0087"
    )


def test_the_page_price_admission_judged_by_is_read_each_second():
    """Where pages are priced the reading carries the price in use: the warm-up's at first,
    then what the live turns taught, second by second."""

    def body(page_s: float) -> str:
        stats = AdmissionStats(
            streams=10,
            capacity_streams=100,
            live_turns=5,
            turn_fixed_s=0.003,
            turn_per_row_s=5e-6,
            turn_per_page_s=page_s,
        )
        return metrics_text(stats)

    readings = [(0.4, parse_reading(0.4, body(2.57e-7)).admission)]
    readings.append((9.2, parse_reading(9.2, body(2.29e-7)).admission))
    fits = turn_fit_by_second(readings)
    assert fits == {0: (3.0, 0.005, 0.257), 9: (3.0, 0.005, 0.229)}
    view = {
        **readings[-1][1],
        "refusals": {},
        "gateway_refusals": {},
        "turn_fit_by_second": {str(s): list(f) for s, f in fits.items()},
    }
    assert describe_admission(view)[-1].endswith("0s:3+0.005+0.257us 9s:3+0.005+0.229us")
