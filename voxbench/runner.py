"""One benchmark run, end to end: for each system (the engine under its first policy, the HF
baseline, then any other policy, one at a time on the GPU), measure throughput RTF, start its
server, warm it up, search its goodput over rate points, stop it; then write the results JSON
(after every point, so a run cut short still leaves its data) and the plot."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.request_trace import read_traces
from engine.request_trace import summarize as summarize_traces
from voxbench import report, servers
from voxbench.config import BenchConfig
from voxbench.engine_loop import describe_loop, loop_profile, read_loop_totals
from voxbench.goodput import search_goodput
from voxbench.loadgen import ClientOptions, LoadGenerator, probe_session
from voxbench.metrics import describe_not_viable, summarize
from voxbench.records import RequestRecord
from voxbench.workload import (
    burst_plan,
    load_workload,
    poisson_plan,
)

log = logging.getLogger("voxgate.bench")
_CLIENT_LAG_WARN_MS = 20.0  # p99 loop lag above this: the client may be part of what was measured


@dataclass(frozen=True)
class SystemSpec:
    name: str  # voxgate-slack, voxgate-fcfs, hf-baseline, or voxgate for --url
    kind: str  # "voxgate" or "hf-baseline"
    policy: str | None
    url: str | None  # None: started here


class BenchRun:
    def __init__(self, cfg: BenchConfig, argv: list[str] | None = None) -> None:
        self.cfg = cfg
        self.items = load_workload(cfg.workload, cfg.max_audio_seconds)
        self.started = time.monotonic()
        # Tokens per audio second: --token-rate, else the served model's (_resolve_token_rate).
        self.token_rate: float | None = cfg.token_rate
        # The engine's request timelines of the server this bench started and is measuring.
        self._trace_path: Path | None = None
        now = datetime.datetime.now(datetime.UTC)
        machine = report.machine_name()
        self.path = report.results_path(Path(cfg.out_dir), machine, cfg.model, now)
        self.results: dict[str, Any] = {
            "schema": report.SCHEMA,
            "model": cfg.model,
            "machine": machine,
            **report.git_commit(cfg.commit),
            "created_utc": now.isoformat(timespec="seconds"),
            "command": " ".join(argv if argv is not None else sys.argv),
            "settings": self._settings(),
            "systems": {},
        }

    def _settings(self) -> dict[str, Any]:
        c = self.cfg
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(c).items()}
        data.pop("api_key")
        data["slo"] = dataclasses.asdict(c.slo)
        data["output_audio"] = c.output_audio
        data["workload_items"] = len(self.items)
        data["token_rate_from"] = "server" if c.token_rate is None else "--token-rate"
        return data

    # --- the run ---------------------------------------------------------------------------
    def systems(self) -> list[SystemSpec]:
        c = self.cfg
        if not c.serve:
            specs = [SystemSpec("voxgate", "voxgate", None, c.url)]
            if c.baseline_url:
                specs.append(SystemSpec("hf-baseline", "hf-baseline", None, c.baseline_url))
            return specs
        first, *others = c.policies
        specs = [SystemSpec(f"voxgate-{first}", "voxgate", first, None)]
        if c.baseline:
            specs.append(SystemSpec("hf-baseline", "hf-baseline", None, None))
        return specs + [SystemSpec(f"voxgate-{p}", "voxgate", p, None) for p in others]

    def run(self) -> Path:
        specs = self.systems()
        self._save()  # creates the folder and claims the file name
        log.info("results: %s", self.path)
        with LoadGenerator(self.cfg.client_procs) as gen:
            for i, spec in enumerate(specs):
                # Priorities: the first policy, then the baseline (the method wants both in
                # one run), then ablation policies with whatever time is left.
                later_baseline = sum(1 for s in specs[i + 1 :] if s.kind == "hf-baseline")
                self._run_system(gen, spec, reserve_s=self._reserve(later_baseline, 0.4))
        self._finish()
        return self.path

    def _reserve(self, later: int, cap: float) -> float:
        """Time kept back for `later` phases still to come: reserve_s each, at most `cap` of
        the budget (the system being measured keeps the larger part)."""
        return min(self.cfg.reserve_s * later, cap * (self.cfg.time_budget_s or 0.0))

    def _remaining(self, reserve_s: float) -> float:
        if self.cfg.time_budget_s is None:
            return math.inf
        return self.cfg.time_budget_s - (time.monotonic() - self.started) - reserve_s

    def _run_system(self, gen: LoadGenerator, spec: SystemSpec, reserve_s: float) -> None:
        entry: dict[str, Any] = {
            "kind": spec.kind,
            "policy": spec.policy,
            "goodput_req_s": 0.0,
            "points": [],
        }
        self.results["systems"][spec.name] = entry
        if self._remaining(reserve_s) < 30:
            entry["skipped"] = "time budget"
            log.warning("%s skipped: time budget", spec.name)
            return
        n = self.cfg.throughput if spec.kind == "voxgate" else self.cfg.baseline_throughput
        first_of_kind = spec.kind == "hf-baseline" or spec.policy in (None, self.cfg.policies[0])
        in_process = bool(n and self.cfg.serve and first_of_kind)
        # The baseline's RTF decides how its rates are searched, so it comes first; the
        # engine's goodput matters more than its RTF, so that comes first when time is short.
        if in_process and spec.kind == "hf-baseline":
            entry["throughput"] = self._throughput_subprocess(spec, n, reserve_s)
        later = self._reserve(1, 0.15) if in_process and spec.kind == "voxgate" else 0.0
        try:
            self._serve_and_search(
                gen, spec, entry, reserve_s + later, ws_throughput_n=0 if self.cfg.serve else n
            )
        finally:
            self._save()
            report.plot(self.results, self.path)
        if in_process and spec.kind == "voxgate":
            entry["throughput"] = self._throughput_subprocess(spec, n, reserve_s)
            self._save()

    def _serve_and_search(
        self,
        gen: LoadGenerator,
        spec: SystemSpec,
        entry: dict,
        reserve_s: float,
        ws_throughput_n: int,
    ) -> None:
        self._trace_path = None  # set by _start for a server of ours
        try:
            server = self._start(spec, reserve_s) if spec.url is None else None
        except RuntimeError as exc:  # recorded; the other systems still run
            log.error("%s", exc)
            entry["error"] = str(exc)[-4000:]
            return
        try:
            url = server.url if server else spec.url
            if server:
                entry["server"] = {"command": server.command, "startup_s": server.startup_s}
                entry["server"]["log"] = str(server.log_path)
            self._resolve_token_rate(url)
            self._warmup(gen, url)
            if ws_throughput_n:
                entry["throughput"] = self._throughput_ws(gen, url, ws_throughput_n)
            rtf = (entry.get("throughput") or {}).get("rtf")
            settings, note, early_stop = self.cfg.search_settings(
                spec.kind, rtf, self._primary_rates(spec)
            )
            if note:
                entry["note"] = note
            http = server.http if server else servers.http_base(url)
            result = search_goodput(
                lambda rate: self._point(gen, url, http, rate, entry, reserve_s, early_stop),
                settings,
            )
            entry["goodput_req_s"] = result.goodput
            entry["search"] = {
                **dataclasses.asdict(settings),
                "ended_by": result.ended_by,
                "order": [{"rate": r, "passed": ok} for r, ok in result.points],
            }
            log.info("%s: goodput %.3g req/s", spec.name, result.goodput)
        finally:
            if server:
                servers.stop_server(server)

    def _resolve_token_rate(self, url: str) -> None:
        """Without --token-rate, ask the server its model's rate (session.started token_rate_hz)
        before its load; every system of a run must serve the same model, so the same rate."""
        if self.cfg.token_rate is not None:
            return
        rate = probe_session(self._options(url)).get("token_rate_hz")
        if not isinstance(rate, int | float) or rate <= 0:
            raise RuntimeError(
                f"{url} does not state its model's token rate (session.started has no "
                "token_rate_hz: a server older than this bench); pass --token-rate, the model's "
                "LLM tokens per second of audio (Orpheus 82.03, CosyVoice 2 25)"
            )
        if self.token_rate is not None and not math.isclose(rate, self.token_rate):
            raise RuntimeError(
                f"{url} serves a model of {rate:g} tokens/s, the run's first system one of "
                f"{self.token_rate:g}: the systems must serve the same model"
            )
        if self.token_rate is None:
            log.info("token rate: %g tokens per audio second (from %s)", rate, url)
        self.token_rate = self.results["settings"]["token_rate"] = float(rate)

    def _start(self, spec: SystemSpec, reserve_s: float) -> servers.ServerProcess:
        c = self.cfg
        port = servers.free_port()
        if spec.kind == "hf-baseline":
            cmd = servers.baseline_command(c.model, c.random_weights, c.device, port)
        log_path = self.path.with_name(f"{self.path.stem}.{spec.name}.log")
        if spec.kind != "hf-baseline":
            # The engine's per-request timelines: each point's summary says where its time to
            # first audio and its gaps went (engine/request_trace.py).
            self._trace_path = log_path.with_suffix(".trace.jsonl")
            self._trace_path.unlink(missing_ok=True)
            extra = [*c.server_args, "--trace-requests", str(self._trace_path)]
            cmd = servers.serve_command(
                c.model, c.random_weights, spec.policy, c.device, port, extra
            )
        timeout = min(c.startup_timeout_s, max(30.0, self._remaining(reserve_s)))
        return servers.start_server(spec.name, cmd, port, log_path, timeout)

    def _primary_rates(self, spec: SystemSpec) -> tuple[float, ...]:
        """For a policy after the first: the rates the first policy's points ran at."""
        first = f"voxgate-{self.cfg.policies[0]}"
        if spec.policy in (None, self.cfg.policies[0]) or first not in self.results["systems"]:
            return ()
        return tuple(sorted({p["rate"] for p in self.results["systems"][first]["points"]}))

    # --- one rate point ----------------------------------------------------------------------
    def _options(self, url: str, drain_timeout_s: float | None = None) -> ClientOptions:
        c = self.cfg
        return ClientOptions(
            url,
            c.output_audio,
            c.initial_buffer_ms,
            api_key=c.api_key,
            drain_timeout_s=drain_timeout_s or c.drain_timeout_s,
        )

    def _point(
        self,
        gen: LoadGenerator,
        url: str,
        http: str | None,
        rate: float,
        entry: dict[str, Any],
        reserve_s: float,
        early_stop: bool = True,
    ) -> bool | None:
        c = self.cfg
        min_requests = c.baseline_min_requests if entry["kind"] == "hf-baseline" else c.min_requests
        plan = poisson_plan(self.items, rate, c.duration_s, min_requests, self.token_rate, c.seed)
        longest = max(p.tokens for p in plan) / self.token_rate
        if self._remaining(reserve_s) < plan[-1].offset_s + longest + 5 + c.settle_s:
            log.warning("rate %g skipped: time budget", rate)
            return None
        stop = c.early_stop and early_stop
        stop_after = math.floor((1 - c.slo.viability) * len(plan)) if stop else None
        pauses_before = servers.server_pauses(http) if http else None
        loop_before = read_loop_totals(http) if http else None
        began = time.monotonic()  # the engine's clock too (same machine): its traces' arrivals
        outcome = gen.run(plan, self._options(url), stop_after)
        ended = time.monotonic()
        loop_after = read_loop_totals(http) if http else None
        summary = summarize(outcome.records, c.initial_buffer_ms, c.slo, rate)
        if outcome.stopped_early:
            summary["passes"] = False
        lag_p99 = outcome.client["loop_lag_ms"]["p99"] or 0.0
        entry["points"].append(
            {
                "rate": rate,
                "summary": summary,
                "stopped_early": outcome.stopped_early,
                "drain_timeouts": outcome.drain_timeouts,
                "wall_s": outcome.wall_s,
                "planned_requests": len(plan),
                "planned_span_s": round(plan[-1].offset_s, 2),
                "client": {**outcome.client, "saturated": lag_p99 > _CLIENT_LAG_WARN_MS},
                "engine_loop": loop_profile(loop_before, loop_after, ended - began),
                "records": [r.to_json() for r in outcome.records],
            }
        )
        log.info(
            "rate %g req/s: %d requests (%s req/s as sent), p90 TTFA %s ms, viability %.1f%%, %s%s",
            rate,
            summary["requests"],
            summary.get("achieved_rate", "?"),
            summary["ttfa_ms"]["p90"],
            100 * summary["viability"],
            "PASS" if summary["passes"] else "fail",
            " (stopped early)" if outcome.stopped_early else "",
        )
        not_viable = describe_not_viable(summary)
        if not_viable:
            log.info("  %s", not_viable)
        for line in describe_loop(entry["points"][-1]["engine_loop"]):
            log.info("  %s", line)
        self._save()
        if http:
            servers.wait_idle(http)
            pauses = servers.pauses_between(pauses_before, servers.server_pauses(http))
            entry["points"][-1]["server_pauses"] = pauses
            for line in servers.describe_pauses(pauses):
                log.info("  %s", line)
        trace = self._trace_path
        if trace is not None and http and trace.exists():
            # Every request of the point has finished or been cancelled by now (idle server).
            traces = read_traces(trace, began, ended)
            entry["points"][-1]["engine_trace"] = engine = summarize_traces(traces)
            self._save()
            p50 = {k: (v or {}).get("p50") for k, v in engine.items() if isinstance(v, dict | None)}
            log.info(
                "  engine p50 ms: first token %s, +steps to first chunk %s, +held %s, "
                "+codec wait %s, +codec %s = first audio %s; second chunk %s later; "
                "LLM step %s; gaps %s",
                p50["to_first_token"],
                p50["to_first_chunk_tokens"],
                p50["held"],
                p50["codec_wait"],
                p50["codec"],
                p50["first_audio"],
                p50["second_after_first"],
                p50["step_ms"],
                engine["gaps_ms"] or "none",
            )
        time.sleep(c.settle_s)
        return bool(summary["passes"])

    def _warmup(self, gen: LoadGenerator, url: str) -> None:
        if self.cfg.warmup <= 0:
            return
        tokens = round(self.token_rate)  # ~1 s of audio each
        plan = [
            dataclasses.replace(p, tokens=tokens)
            for p in burst_plan(self.items, self.cfg.warmup, self.token_rate, -1)
        ]
        outcome = gen.run(plan, self._options(url, drain_timeout_s=300.0))
        bad = [r.failure for r in outcome.records if not r.ok]
        if bad:
            log.warning(
                "warm-up: %d of %d requests failed (%s)",
                len(bad),
                len(plan),
                ", ".join(map(str, bad)),
            )

    # --- throughput --------------------------------------------------------------------------
    def _throughput_subprocess(self, spec: SystemSpec, n: int, reserve_s: float) -> dict[str, Any]:
        c = self.cfg
        cmd = [
            sys.executable,
            "-m",
            "voxbench.throughput",
            "--system",
            spec.kind,
            "--model",
            c.model,
            "--requests",
            str(n),
            "--workload",
            str(c.workload),
            "--seed",
            str(c.seed),
        ]
        cmd += ["--policy", spec.policy] if spec.policy else []
        cmd += ["--random-weights"] if c.random_weights else []
        cmd += ["--device", c.device] if c.device else []
        cmd += ["--max-audio-seconds", str(c.max_audio_seconds)] if c.max_audio_seconds else []
        if spec.kind == "voxgate":  # the engine as the served points ran it
            cmd += [f"--server-arg={arg}" for arg in c.server_args]
        log_path = self.path.with_name(f"{self.path.stem}.{spec.name}.throughput.log")
        log.info("%s: throughput, %d requests at once", spec.name, n)
        timeout = max(60.0, min(1800.0, self._remaining(reserve_s)))
        with tempfile.TemporaryDirectory() as tmp, log_path.open("w") as out:
            result_path = Path(tmp) / "rtf.json"
            try:
                done = subprocess.run(
                    [*cmd, "--out", str(result_path)],
                    cwd=servers.REPO_ROOT,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                log.error("%s: throughput run passed %.0f s; see %s", spec.name, timeout, log_path)
                return {"error": f"timed out after {timeout:.0f} s; see {log_path}", "command": cmd}
            if done.returncode != 0 or not result_path.exists():
                log.error(
                    "%s: throughput run failed (exit %d); see %s",
                    spec.name,
                    done.returncode,
                    log_path,
                )
                return {"error": f"exit {done.returncode}; see {log_path}", "command": cmd}
            result = json.loads(result_path.read_text())
        log.info(
            "%s: RTF %.2f (%s s audio in %s s)",
            spec.name,
            result["rtf"],
            result["audio_s"],
            result["wall_s"],
        )
        for line in describe_loop(result.get("engine_loop")):
            log.info("  %s", line)
        return {**result, "command": cmd}

    def _throughput_ws(self, gen: LoadGenerator, url: str, n: int) -> dict[str, Any]:
        plan = burst_plan(self.items, n, self.token_rate, self.cfg.seed)
        outcome = gen.run(plan, self._options(url, drain_timeout_s=1800.0))
        return ws_throughput(outcome.records)

    # --- output ------------------------------------------------------------------------------
    def _save(self) -> None:
        """Headline and all points so far: a run that is cut off still leaves a complete file."""
        self.results.update(report.headline(self.results, self.cfg))
        self.results["elapsed_s"] = round(time.monotonic() - self.started, 1)
        report.write_json(self.path, self.results)

    def _finish(self) -> None:
        self._save()
        png = report.plot(self.results, self.path)
        if png:
            log.info("plot: %s", png)


def ws_throughput(records: list[RequestRecord]) -> dict[str, Any]:
    """RTF of a burst played over WebSocket: received audio / (first send → last frame). The
    server paces each response at most lead_ms ahead of real time, so this is a lower bound."""
    sent = [r.sent_s for r in records if r.sent_s is not None]
    ends = [
        r.sent_s + r.arrivals_ms[-1] / 1000
        for r in records
        if r.sent_s is not None and r.arrivals_ms
    ]
    audio = sum(r.received_audio_ms for r in records) / 1000
    wall = (max(ends) - min(sent)) if ends and sent else 0.0
    return {
        "method": "websocket burst (paced by the server's lead: a lower bound)",
        "requests": len(records),
        "ok": sum(r.ok for r in records),
        "audio_s": round(audio, 3),
        "wall_s": round(wall, 3),
        "rtf": round(audio / wall, 3) if wall > 0 else None,
    }
