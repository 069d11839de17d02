"""voxbench/servers.py keeps the servers a bench started until it stops them, so a SIGTERM to
the bench (voxbench/cli.py's handler) can stop every one of them before the bench exits."""

from __future__ import annotations

import sys

from voxbench import servers

# A stand-in server: answers GET /ready with 200 until it is stopped. It takes SIGINT as a
# server does (uvicorn installs its own handler): a process started in the background by a
# non-interactive shell inherits SIGINT ignored, and stop_server's SIGINT would then wait out
# its 30 s before SIGTERM.
READY_SERVER = """
import http.server, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Ready).serve_forever()
"""


def test_a_bench_stops_every_server_it_started_and_has_not_stopped(tmp_path):
    started = []
    for name in ("a", "b"):
        port = servers.free_port()
        command = [sys.executable, "-c", READY_SERVER, str(port)]
        started.append(servers.start_server(name, command, port, tmp_path / f"{name}.log", 30))
    servers.stop_server(started[0])  # stopped in order: no longer the handler's to stop
    assert started[1].process.poll() is None
    servers.stop_started_servers()
    assert all(server.process.poll() is not None for server in started)
    assert servers.ready_info(started[1].http) is None
    servers.stop_started_servers()  # nothing left to stop
