"""`voxgate bench --capacity`: the staggered plan, the per-point verdict (frames on time over
what the listeners asked for, refusals, TTFA), the engine-loop profile read from /metrics, and
one served ladder end to end on the CPU with tiny-orpheus."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.request_trace import read_traces
from gateway.cli import main
from gateway.metrics import LOOP_TOTALS
from gateway.response import segment_request_id
from voxbench.capacity import (
    WARM_UP_AUDIO_S,
    CapacityRun,
    capacity_of,
    describe_late_streams,
    summarize_capacity,
)
from voxbench.engine_loop import describe_loop, loop_profile, parse_loop_totals
from voxbench.metrics import frame_lateness
from voxbench.records import RequestRecord
from voxbench.workload import WorkItem, staggered_plan, tokens_for

ITEMS = [WorkItem(f"s{i}", f"sentence {i}", 3.0 + i) for i in range(5)]


def test_staggered_plan_spreads_listeners_evenly_with_one_length():
    plan = staggered_plan(ITEMS, 8, 10.0, 30.0, 82.0, seed=3)
    assert [p.offset_s for p in plan] == pytest.approx([i * 1.25 for i in range(8)])
    assert {p.tokens for p in plan} == {tokens_for(30.0, 82.0)}
    assert {p.item.audio_seconds for p in plan} == {30.0}
    assert {p.item.id for p in plan} == {i.id for i in ITEMS}  # 8 listeners cycle the 5 texts
    assert plan == staggered_plan(ITEMS, 8, 10.0, 30.0, 82.0, seed=3)  # deterministic
    with pytest.raises(ValueError):
        staggered_plan(ITEMS, 0, 10.0, 30.0, 82.0)


def _record(index, arrivals, audio_seconds=0.1, done=True, errors=(), close=None):
    rec = RequestRecord(index, "w", audio_seconds, 8, 0.0, frame_ms=20.0)
    rec.arrivals_ms = list(arrivals)
    rec.done = {"status": "length", "audio_ms": 20 * len(arrivals)} if done else None
    rec.errors = list(errors)
    rec.close_code = close
    return rec


def test_frame_lateness_against_the_first_frame_clock():
    assert frame_lateness([100, 110, 150, 160], [20] * 4, 0) == [0, -10, 10, 0]
    assert frame_lateness([100, 150], [20, 20], 40) == [-40, -10]


def test_summarize_capacity_holds_only_when_every_listener_plays_on_time():
    on_time = [_record(i, [100 + i, 110 + i, 130 + i, 150 + i, 170 + i]) for i in range(4)]
    s = summarize_capacity(on_time, 0.0, 0.999, 500.0)
    assert s["holds"] and s["on_time"] == 1.0 and s["frames_expected"] == 20
    assert s["late_streams"] == 0 and s["refused"] == 0 and s["ttfa_ms"]["p90"] < 500

    late = [*on_time[:3], _record(3, [100, 150, 170, 190, 210])]  # second frame 30 ms late
    s = summarize_capacity(late, 0.0, 0.999, 500.0)
    assert not s["holds"] and s["late_streams"] == 1
    assert s["frames_on_time"] == 16 and s["late_ms"]["max"] == pytest.approx(30.0)
    assert summarize_capacity(late, 40.0, 0.999, 500.0)["holds"]  # a 40-ms buffer covers it

    refused = [*on_time[:3], _record(3, [], done=False, close=1013)]
    s = summarize_capacity(refused, 0.0, 0.5, 500.0)
    assert s["refused"] == 1 and s["failed"] == 0 and not s["holds"]
    assert s["frames_expected"] == 15 + 5  # the refused listener's 100 ms count as missing

    late[3].sent_s = 6.9  # its 4 late frames (150-210 ms after sending) came in second 7
    s_late = summarize_capacity(late, 0.0, 0.999, 500.0)
    assert s_late["late_by_second"] == {"7": 4}
    assert s["late_by_second"] == {}  # no late frames
    # The late stream: sent at 6.9 s of the point, its first late frame 20 ms into its audio.
    assert s_late["late_stream_sent_s"]["p50"] == 6.9 and s_late["late_stream_sent_s"]["n"] == 1
    assert s_late["first_late_audio_ms"]["max"] == 20.0
    assert "first late frame at 20.0 ms of their audio" in describe_late_streams(s_late)
    assert "sent at 6.9 s of the point" in describe_late_streams(s_late)
    assert describe_late_streams(s) == ""  # none late: no line

    slow_start = [_record(i, [900 + i, 920 + i, 940 + i, 960 + i, 980 + i]) for i in range(4)]
    assert not summarize_capacity(slow_start, 0.0, 0.999, 500.0)["holds"]  # TTFA over the SLO


def test_delivery_by_second_says_when_the_server_fell_behind():
    """The audio a running stream got each second, x real time: 1.0 while the server keeps
    pace, less where the listeners' buffers drain (a second's share of each stream counted by
    how much of the second it streamed)."""
    steady = _record(0, [i * 20 for i in range(150)])  # 3 s of 20-ms frames in real time
    steady.sent_s = 10.0
    slow = _record(1, [i * 25 for i in range(150)])  # the same audio at 0.8x real time
    slow.sent_s = 20.0
    s = summarize_capacity([steady, slow], 0.0, 0.999, 500.0)
    by_second = s["delivery_by_second"]
    assert [by_second[k] for k in ("10", "11")] == pytest.approx([1.0, 1.0], abs=0.02)
    assert [by_second[k] for k in ("20", "21", "22")] == pytest.approx([0.8] * 3, abs=0.02)
    assert "13" not in by_second and "19" not in by_second  # no stream then
    line = CapacityRun.describe(None, 2, s)  # frames were late: the line says how far behind
    assert "audio a running stream got by second (x real time): 10s:1.00" in line
    assert "21s:0.80" in line


def test_capacity_is_the_largest_count_that_held():
    def point(n, holds):
        return {"listeners": n, "summary": {"holds": holds}}

    assert capacity_of([point(8, True), point(16, True), point(24, False)]) == 16
    assert capacity_of([point(8, False)]) == 0
    # --repeats: a count holds only if every run of it did.
    runs = [point(8, True), point(8, True), point(16, True), point(16, False)]
    assert capacity_of(runs) == 8
    assert capacity_of([*runs, point(24, True), point(24, True)]) == 24


def test_repeats_run_each_count_on_one_server_and_stop_as_points_fail(monkeypatch, tmp_path):
    """--repeats R measures each count R times in a row on the same server; each point
    records its run, and the early stop counts failed points as without repeats."""
    import voxbench.ladder as ladder
    from gateway.cli import build_parser
    from voxbench.cli import capacity_config_from_args

    class NoProfile:
        def __init__(self, http, trace, buffer_ms):
            pass

        def load_ended(self):
            pass

        def finish(self, point):
            pass

    class Scripted(ladder.LadderRun):
        schema, suffix, count_key = "test", "capacity", "listeners"
        held = {(8, 1): True, (8, 2): True, (16, 1): True, (16, 2): False, (24, 1): False}

        def __init__(self, cfg):
            super().__init__(cfg, ["voxgate", "bench"])
            self.asked: list[int] = []

        def prepare(self, url):
            pass

        def measure(self, url, n):
            self.asked.append(n)
            run = self.asked.count(n)
            return {"listeners": n, "summary": {"holds": self.held[(n, run)]}}

        def describe(self, n, summary):
            return f"{n}: {summary['holds']}"

    monkeypatch.setattr(ladder, "ServerProfile", NoProfile)
    argv = ["bench", "--url", "ws://127.0.0.1:1/v1/stream", "--capacity", "8,16,24,32"]
    cfg = capacity_config_from_args(build_parser().parse_args([*argv, "--repeats", "2"]))
    assert cfg.repeats == 2
    run = Scripted(dataclasses.replace(cfg, out_dir=tmp_path, settle_s=0))
    entry = {"points": []}
    run._ladder(cfg.url, "http://127.0.0.1:1", None, entry)
    # 16's second run and 24's first fail: two in a row, so 24's second run and 32 never ran.
    assert run.asked == [8, 8, 16, 16, 24]
    assert [p["repeat"] for p in entry["points"]] == [1, 2, 1, 2, 1]
    assert entry["capacity"] == 8
    with pytest.raises(ValueError, match="--repeats"):
        capacity_config_from_args(build_parser().parse_args([*argv, "--repeats", "0"]))


def test_loop_profile_from_two_metrics_readings():
    def body(scale):
        lines = [f"{name}_total {scale * (i + 1)}" for i, name in enumerate(LOOP_TOTALS)]
        return "\n".join(["# HELP x", *lines, "voxgate_engine_steps_total 3"])

    before, after = parse_loop_totals(body(1.0)), parse_loop_totals(body(3.0))
    assert before is not None and set(before) == {attr for _, attr in LOOP_TOTALS.values()}
    profile = loop_profile(before, after, 2.0)
    d = {k: after[k] - before[k] for k in after}
    assert profile["llm_step_ms"] == pytest.approx(1e3 * d["llm_s"] / d["llm_steps"], abs=0.01)
    assert profile["loop_busy"] == pytest.approx(d["loop_s"] / 2.0, abs=1e-3)
    shares = (d["llm_s"] + d["codec_s"] + d["lane_s"]) / 2.0
    assert profile["gpu_share"] == pytest.approx(shares, abs=1e-3)
    assert f"LLM + codec {100 * shares:.0f} % of the point" in describe_loop(profile)[1]
    assert parse_loop_totals("voxgate_engine_steps_total 3") is None  # an older server
    between = ("commands_s", "admission_s", "stats_s")
    newer = {f"{name}_total" for name, (_, attr) in LOOP_TOTALS.items() if attr in between}
    older = "\n".join(x for x in body(1.0).splitlines() if x.split(" ")[0] not in newer)
    read = parse_loop_totals(older)  # a build from before the between-turns counters
    assert read is not None and not set(between) & set(read)
    assert "commands_busy" not in loop_profile(read, read, 2.0)
    assert profile.get("gpu_share_by_second") is None  # only a sampled point has it


def test_gpu_shares_by_second_from_sampled_totals():
    """The LLM's and the codec's (lane included) share of each sampled interval, keyed by the
    second it began in: 0.3 s of LLM and 0.2 s of codec in the first second is 50 %."""
    from voxbench.engine_loop import gpu_shares

    def totals(llm, codec, lane=0.0):
        return {"llm_s": llm, "codec_s": codec, "lane_s": lane, "rows": 0.0}

    samples = [(0.0, totals(0, 0)), (1.0, totals(0.3, 0.2)), (2.0, totals(1.0, 0.6, 0.1))]
    assert gpu_shares(samples) == {0: 50, 1: 120}
    assert gpu_shares(samples[:1]) == {}
    profile = {"gpu_share_by_second": {"0": 50, "1": 120}}
    line = describe_loop({**loop_profile_fixture(), **profile})[2]
    assert line.endswith("(%): 0s:50 1s:120")


def test_steps_by_second_from_sampled_totals():
    """Each sampled interval's step pace, step and turn times and rows, with the KV pages in
    use at its end where read: how the step grows with the contexts it reads."""
    from voxbench.engine_loop import steps_by_second

    def totals(steps, llm_s, turns, loop_s, rows):
        return {"llm_steps": steps, "llm_s": llm_s, "loop_turns": turns, "loop_s": loop_s,
                "rows": rows}  # fmt: skip

    samples = [
        (0.0, totals(0, 0.0, 0, 0.0, 0)),
        (1.0, totals(100, 0.6, 100, 0.8, 20000)),  # 100 steps of 6 ms, turns of 8 ms
        (2.0, totals(100, 0.6, 105, 0.85, 20000)),  # no step: left out
        (3.0, totals(180, 1.6, 185, 1.85, 41600)),  # 80 steps of 12.5 ms at 270 rows
    ]
    got = steps_by_second(samples, {1.0: 9000.0, 3.0: 36000.0})
    assert got == {
        0: {"steps_per_s": 100.0, "step_ms": 6.0, "turn_ms": 8.0, "rows": 200.0, "kv_pages": 9000.0},
        2: {"steps_per_s": 80.0, "step_ms": 12.5, "turn_ms": 12.5, "rows": 270.0, "kv_pages": 36000.0},
    }  # fmt: skip
    assert "kv_pages" not in steps_by_second(samples[:2])[0]  # an older server: no gauge read
    profile = {"steps_by_second": {str(s): v for s, v in got.items()}}
    lines = describe_loop({**loop_profile_fixture(), **profile})
    (line,) = [x for x in lines if x.startswith("LLM steps by second")]
    assert line.endswith("0s:100|6|8|200|9000.0 2s:80|12.5|12.5|270|36000.0")


def test_the_loop_time_between_turns_by_second():
    """Where a sampled second's loop time outside its turns went: the commands it applied (of
    them, admission's verdicts) and the stats snapshots, as shares of the second; a server
    without those counters gives none."""
    from voxbench.engine_loop import steps_by_second

    def totals(loop_s, commands_s, admission_s, stats_s):
        return {"llm_steps": 100 * loop_s, "llm_s": loop_s / 2, "loop_turns": 100 * loop_s,
                "loop_s": loop_s, "rows": 0.0, "commands_s": commands_s,
                "admission_s": admission_s, "stats_s": stats_s}  # fmt: skip

    samples = [(0.0, totals(0, 0, 0, 0)), (1.0, totals(0.7, 0.2, 0.15, 0.03))]
    got = steps_by_second(samples)[0]
    assert (got["outside_pct"], got["commands_pct"], got["admission_pct"]) == (30, 20, 15)
    assert got["stats_pct"] == 3
    profile = {**loop_profile_fixture(), "steps_by_second": {"0": got}}
    (line,) = [x for x in describe_loop(profile) if x.startswith("engine loop between")]
    assert line.endswith("(% outside turns|commands|admission|stats): 0s:30|20|15|3")
    old = [(t, {k: v for k, v in x.items() if not k.endswith(("commands_s", "n_s", "stats_s"))})
           for t, x in samples]  # fmt: skip
    assert "outside_pct" not in steps_by_second(old)[0]


def test_a_full_duplex_point_says_which_frames_went_late_and_why():
    """The engine's frame accounting between two readings: frames it finished late against
    frames it stepped on silence because the user's audio had not arrived, and its process's
    full collections, by point and by second: whether the engine or the way in was late."""
    from voxbench.engine_loop import steps_by_second

    zero = {attr: 0.0 for _, attr in LOOP_TOTALS.values()}
    mid = {**zero, "llm_steps": 12, "llm_s": 0.5, "loop_turns": 12, "loop_s": 0.5, "rows": 1536,
           "frames_out": 1536, "frames_late": 0, "input_late": 40}  # fmt: skip
    end = {**mid, "llm_steps": 24, "llm_s": 1.1, "loop_turns": 24, "loop_s": 1.1, "rows": 3072,
           "frames_out": 3072, "frames_late": 256, "input_late": 41, "gc_full": 1,
           "gc_full_s": 0.4, "input_dropped": 3, "resyncs": 1}  # fmt: skip
    profile = loop_profile(zero, end, 2.0)
    assert profile["duplex"] == {"frames_out": 3072, "frames_late": 256, "input_late": 41,
                                 "input_dropped": 3, "resyncs": 1}  # fmt: skip
    profile["steps_by_second"] = steps_by_second([(0.0, zero), (1.0, mid), (2.0, end)])
    lines = describe_loop(profile)
    assert lines[0].endswith(", 1 full GCs of its process (400 ms)")
    assert "3072 stepped, 256 finished after they were due, 41 on silence" in "\n".join(lines)
    assert lines[-1].endswith("(late|on silence|full GCs): 0s:0|40|0 1s:256|1|1")
    tts = loop_profile(zero, {**end, "frames_out": 0.0}, 2.0)
    assert tts["duplex"] is None and not any("engine frames" in x for x in describe_loop(tts))


def test_turn_fit_separates_the_pages_a_step_reads_from_its_rows():
    """The point's turn as a line in rows and KV pages: recovered from seconds where both
    vary apart, printed beside the rows-only line's error; None with too few loaded seconds
    or when pages only ever grew with rows."""
    from voxbench.engine_loop import FIT_MIN_SECONDS, turn_fit

    def second(rows, pages, steps_per_s=90.0):
        turn = 2.9 + 0.006 * rows + 0.00026 * pages  # ms: 2.9 ms + 0.26 us a page
        return {"steps_per_s": steps_per_s, "step_ms": turn - 2, "turn_ms": turn, "rows": rows,
                "kv_pages": pages}  # fmt: skip

    # Contexts grow while the rows level off, as in a capacity point's second half.
    steps = {i: second(100 + 20 * min(i, 8), 2000 * i) for i in range(16)}
    steps[16] = second(300, 40000, steps_per_s=5.0)  # the drain's last second: left out
    steps[17] = {"steps_per_s": 90.0, "step_ms": 5.0, "turn_ms": 99.0, "rows": 99.0}  # no gauge
    fit = turn_fit(steps)
    assert fit["seconds"] == 16
    assert (fit["fixed_ms"], fit["per_row_ms"], fit["per_page_us"]) == (2.9, 0.006, 0.26)
    assert fit["rms_ms"] == 0.0 and fit["rows_only_rms_ms"] > 0.5
    line = describe_loop({**loop_profile_fixture(), "turn_fit": fit})[-1]
    assert line == (
        "turn by rows and KV pages (16 loaded seconds, least squares): 2.9 ms + 0.006 ms/row"
        f" + 0.26 us/page, rms 0 ms (a line in rows alone: rms {fit['rows_only_rms_ms']:g} ms)"
    )
    few = dict(list(steps.items())[: FIT_MIN_SECONDS - 1])
    assert turn_fit(few) is None
    in_step = {i: second(10 * (i + 1), 500 * (i + 1)) for i in range(12)}  # pages ∝ rows
    assert turn_fit(in_step) is None


def loop_profile_fixture() -> dict:
    """A loop profile with every field describe_loop prints."""
    before = {attr: 0.0 for _, attr in LOOP_TOTALS.values()}
    after = {attr: 1.0 for _, attr in LOOP_TOTALS.values()}
    return loop_profile(before, after, 2.0)
    assert loop_profile(None, after, 2.0) is None


def served_capacity(out, model: str, counts: str, *extra: str) -> list[str]:
    """`voxgate bench --serve --capacity` on the CPU. A shared 2-core machine need not stream
    in real time, so the bar is relaxed: the figures must be sane, not pass."""
    return [
        *("--log-level", "WARNING", "bench", "--serve", "--model", model, "--device", "cpu"),
        *("--capacity", counts, *extra, "--min-on-time", "0.01", "--slo-ttfa-ms", "60000"),
        *("--out", str(out)),
    ]


def test_the_warm_up_asks_for_short_requests():
    """The two requests that warm a server up before the first point are each WARM_UP_AUDIO_S
    of audio, their tokens counted from that (not from the item's whole length): a random-weights
    model makes exactly `tokens`, so a warm-up of whole sentences took seconds of a CPU."""
    from voxbench.capacity import warm_up_plan
    from voxbench.workload import DEFAULT_WORKLOAD, load_workload, tokens_for

    items = load_workload(DEFAULT_WORKLOAD)
    assert max(i.audio_seconds for i in items) > 3 * WARM_UP_AUDIO_S
    plan = warm_up_plan(items, token_rate=50.0)
    assert len(plan) == 2
    for planned in plan:
        assert planned.item.audio_seconds <= WARM_UP_AUDIO_S
        assert planned.tokens == tokens_for(planned.item.audio_seconds, 50.0) <= 50


@pytest.mark.timeout(300)
def test_capacity_ladder_served_on_the_cpu(tmp_path, tiny_orpheus_dirs, capsys, served_bench):
    # Admission off: on a slow 2-core machine real-time admission rightly refuses a second
    # tiny-orpheus stream it cannot keep in real time, and this test is about the ladder and
    # what each point records (admission's refusals have tests of their own).
    argv = served_capacity(
        tmp_path, "tiny-orpheus", "1,2", "--stagger", "0.5", "--stream-seconds", "1",
        "--server-arg=--no-realtime-admission",
    )  # fmt: skip
    assert main(argv) == 0
    assert "capacity" in capsys.readouterr().out
    [path] = tmp_path.glob("*.json")
    assert path.name.endswith("-tiny-orpheus-capacity.json")
    assert path.with_suffix(".png").stat().st_size > 10_000
    data = json.loads(path.read_text())
    system = data["systems"]["voxgate-slack"]
    assert [p["listeners"] for p in system["points"]] == [1, 2]
    for point in system["points"]:
        s = point["summary"]
        assert s["listeners"] == len(point["records"]) and s["refused"] == s["failed"] == 0
        assert s["frames_expected"] >= 40 * s["listeners"]  # ~1 s of 20-ms frames each
        assert 0 < s["frames_on_time"] <= s["frames_expected"]
        loop = point["engine_loop"]
        assert loop["llm_steps_per_s"] > 0 and loop["rows_per_step"] >= 1
        assert loop["codec_jobs"] > 0 and loop["audio_x_realtime"] > 0
        # /metrics sampled each second of the point: the LLM's and the codec's busy time, each
        # booked when its step or job ends, so one second may carry a job begun in the one
        # before; over the point no more than the three (LLM, steady codec, lane) at once.
        shares = loop["gpu_share_by_second"]
        assert shares and all(int(s) >= 0 and v >= 0 for s, v in shares.items())
        assert sum(shares.values()) <= 300 * len(shares)
        steps = loop["steps_by_second"]  # the step's pace against the KV pages in use
        assert steps and all(v["steps_per_s"] > 0 and v["rows"] >= 1 for v in steps.values())
        # the KV pages in use, read at each interval's end (0 once the point's streams ended)
        assert all(v["kv_pages"] >= 0 for v in steps.values())
        assert point["engine_trace"]["requests"] >= s["listeners"]
        # Each record names its response, whose first segment's trace is in the point, and its
        # send time on the clock the engine shares (voxbench/late_chunks.py reads them).
        trace = path.with_name(f"{path.stem}.voxgate-slack.trace.jsonl")
        traced = {t["request_id"] for t in read_traces(trace)}
        for record in point["records"]:
            assert segment_request_id(record["response_id"], 0) in traced
            assert record["sent_at"] > 0
        assert "late_chunks" in point  # None: no stream was late enough to look at
        assert point["admission"]["refusals"] == {}  # none refused, by any cause
        assert point["admission"]["gateway_refusals"] == {}
        assert point["admission"]["capacity_streams"] >= 0
        room = point["admission"]["room_by_second"]  # read through the point, not only at its end
        assert room and all(int(s) >= 0 and n >= 1 for s, n in room.items())
        # The turn cost model replayed over the point's traced turns (voxbench/turn_accuracy.py).
        foreseen = point["admission"]["turn_model_vs_measured"]
        assert set(foreseen) == {"1s", "5s", "10s", "20s"}
        assert all(ratio is None or ratio > 0 for ratio in foreseen.values())
    assert system["capacity"] == 2  # both held under the relaxed bar


def test_microphone_packets_are_opus_at_the_protocols_default():
    import av

    from voxbench.capacity import MIC_AUDIO, microphone_packets

    packets = microphone_packets(seconds=1.0)
    assert 49 <= len(packets) <= 51 and all(0 < len(p) < 1500 for p in packets)
    codec = av.CodecContext.create("opus", "r")
    codec.sample_rate, codec.layout = MIC_AUDIO["sample_rate"], "mono"
    samples = sum(f.samples for p in packets for f in codec.decode(av.Packet(p)))
    assert abs(samples - MIC_AUDIO["sample_rate"]) <= 2 * 960  # ~1 s of 48 kHz audio


@pytest.mark.timeout(300)
def test_full_duplex_listeners_talk_on_the_cpu(tmp_path, capsys, served_bench):
    """A full-duplex model (tiny-moshi): each listener streams Opus microphone packets in real
    time and hears the model's audio; the point's verdict and the duplex loop's profile."""
    argv = served_capacity(
        tmp_path, "tiny-moshi", "1", "--stream-seconds", "2", "--initial-buffer-ms", "80"
    )
    assert main(argv) == 0
    [path] = tmp_path.glob("*-tiny-moshi-capacity.json")
    data = json.loads(path.read_text())
    assert data["settings"]["listeners_talk"] is True
    [point] = data["systems"]["voxgate-slack"]["points"]
    [record] = point["records"]
    assert record["done"]["status"] == "completed"  # ended by the client's input.commit
    s = point["summary"]
    assert s["failed"] == 0 and s["frames_on_time"] > 0
    assert 1.2 <= s["frames_expected"] * 20 / 1000 <= 3.0  # ~2 s of talk, ~2 s of answer
    loop = point["engine_loop"]
    assert loop["llm_steps_per_s"] > 5 and loop["rows_per_step"] >= 1  # 12.5 frames a second
    assert loop["audio_x_realtime"] > 0


def test_no_early_stop_runs_every_point_of_a_ladder():
    """Two failed points in a row end a ladder, unless --no-early-stop asks for every point
    (an A/B of two builds compares them point by point)."""
    from gateway.cli import build_parser
    from voxbench.cli import capacity_config_from_args
    from voxbench.ladder import ladder_stops

    def config(*extra):
        args = build_parser().parse_args(["bench", "--serve", "--capacity", "8,16,24", *extra])
        return capacity_config_from_args(args)

    assert config().stop_after_failures == 2
    assert config("--no-early-stop").stop_after_failures == 0
    assert [ladder_stops(m, 2) for m in (0, 1, 2, 3)] == [False, False, True, True]
    assert not any(ladder_stops(m, 0) for m in range(10))


def test_a_drain_timeout_shorter_than_a_stream_is_refused_before_any_point():
    """The wait for the rest counts from the last listener's start: a shorter one than the
    streams would end each point early and count the unfinished frames as lost (a 240-point
    run cut ~30 s in, with 223 of 240 streams unfinished, read as "85 %, does not hold")."""
    from gateway.cli import build_parser
    from voxbench.cli import capacity_config_from_args

    def config(*extra):
        args = build_parser().parse_args(["bench", "--serve", "--capacity", "8", *extra])
        return capacity_config_from_args(args)

    with pytest.raises(ValueError, match="give --drain-timeout 30 or more"):
        config("--drain-timeout", "20")
    assert config("--drain-timeout", "30").drain_timeout_s == 30
    assert config("--drain-timeout", "5", "--stream-seconds", "4").stream_s == 4


@pytest.mark.timeout(180)
def test_a_terminated_bench_stops_the_server_it_started(tmp_path):
    """The server `bench --serve` starts runs in its own session, out of a terminal's ^C; a
    SIGTERM to the bench (`timeout`, an orchestrator) must still stop it, or it keeps the GPU
    and the next run gets a fraction of its memory."""
    import re
    import signal
    import subprocess
    import sys
    import time

    from voxbench.servers import ready_info

    # Real-time admission off: its calibration at the server's warm-up only delays the
    # "ready" this test waits for, and what is tested is the server's stop.
    argv = served_capacity(
        tmp_path, "voxgate-tiny", "1", "--stream-seconds", "60",
        "--server-arg=--no-realtime-admission",
    )  # fmt: skip
    argv[argv.index("--log-level") + 1] = "INFO"
    log_path = tmp_path / "bench.log"
    with log_path.open("w") as log_file:
        bench = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", *argv], stdout=log_file, stderr=log_file
        )
        try:
            deadline = time.monotonic() + 120
            while "ready after" not in log_path.read_text():
                assert bench.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
            port = re.search(r"--port (\d+)", log_path.read_text()).group(1)
            http = f"http://127.0.0.1:{port}"
            assert ready_info(http) is not None
            bench.send_signal(signal.SIGTERM)
            assert bench.wait(60) == 128 + signal.SIGTERM, log_path.read_text()[-4000:]
        finally:
            if bench.poll() is None:
                bench.kill()
    outlived = ready_info(http) is not None
    if outlived:  # don't leave it running for the rest of the suite
        subprocess.run(["pkill", "-f", f"serve .*--port {port}"], check=False)
    assert not outlived, "the bench's server outlived it"


def test_a_server_that_cannot_start_is_recorded_and_fails_the_run(tmp_path, capsys, served_bench):
    """The server refuses its arguments (a tiny preset is random already): the run records why
    in its results and exits 1, so a script does not take an empty ladder for a measured one."""
    argv = served_capacity(tmp_path, "tiny-moshi", "2", "--random-weights")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "voxgate-slack: not measured: voxgate-slack exited with 2" in err
    [path] = tmp_path.glob("*-capacity.json")
    system = json.loads(path.read_text())["systems"]["voxgate-slack"]
    assert system["capacity"] == 0 and system["points"] == []
    assert "tiny-moshi is random already" in system["error"]
