"""N streams at once through the served path: does every one of them play in real time?

    python bench/served_streams.py --model <voxgate-tiny folder> --device cpu --streams 4 \
        [--rounds 3] [--server-arg=--no-realtime-admission ...]

Starts `voxgate serve` (the server's own defaults plus any --server-arg), then for each round
sends `--streams` workload requests at the same instant, each on its own WebSocket session
(the bench client's code: voxbench/loadgen.py), and waits for all of them. The goodput
search of `voxgate bench` spreads Poisson arrivals over a rate; this asks the capacity question
directly: N concurrent listeners, all starting together (the hardest start for TTFA), with no
client-side buffer. Per round: late frames, stall time, TTFA and refusals (`overloaded`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from voxbench import servers
from voxbench.loadgen import ClientOptions, LoadGenerator, probe_session
from voxbench.metrics import Slo, summarize
from voxbench.workload import DEFAULT_WORKLOAD, burst_plan, load_workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--device", default=None)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-audio-seconds", type=float, default=8.0, help="cap each request")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--pause-s", type=float, default=2.0, help="idle time between rounds")
    args = p.parse_args()

    items = load_workload(DEFAULT_WORKLOAD, args.max_audio_seconds)
    port = servers.free_port()
    command = servers.serve_command(args.model, False, "slack", args.device, port, args.server_arg)
    log_path = Path(tempfile.mkdtemp(prefix="served-streams-")) / "server.log"
    server = servers.start_server("voxgate", command, port, log_path, timeout_s=600)
    rounds = []
    try:
        opts = ClientOptions(server.url, drain_timeout_s=120.0)
        rate = float(probe_session(opts)["token_rate_hz"])
        with LoadGenerator() as gen:
            for i in range(args.rounds):
                plan = burst_plan(items, args.streams, rate, seed=i)
                outcome = gen.run(plan, opts)
                s = summarize(outcome.records, 0.0, Slo())
                refused = sum(
                    any(e.get("code") == "overloaded" for e in r.errors) for r in outcome.records
                )
                rounds.append(
                    {
                        "round": i,
                        "audio_s": round(
                            sum(r.received_audio_ms for r in outcome.records) / 1e3, 2
                        ),
                        "viable": f"{s['viable']}/{s['requests']}",
                        "refused": refused,
                        "late_frames": s["late_frames"],
                        "underrun_ms": round(s["underrun_ms_total"], 1),
                        "ttfa_ms_p50_max": (s["ttfa_ms"]["p50"], s["ttfa_ms"]["max"]),
                    }
                )
                print(json.dumps(rounds[-1]), flush=True)
                time.sleep(args.pause_s)
    finally:
        servers.stop_server(server)
    print(
        json.dumps(
            {
                "model": args.model,
                "streams": args.streams,
                "server_args": args.server_arg,
                "rounds": rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
