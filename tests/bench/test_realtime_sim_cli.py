"""`python -m voxbench.realtime_sim`: the capacity benchmark's ramp through the real scheduler
on a simulated device, from the command line."""

import re

import pytest

from voxbench.realtime_sim import main

# A device that carries a handful of streams: 3 ms + 1 ms a row against 12.2 ms of audio a token.
SMALL = ["--stream-s", "3", "--stagger-s", "1", "--turn-ms", "3,1", "--burst-slope-ms", "1"]


def counts(out: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+) admitted, (\d+) refused, (\d+) late", out)
    assert m, out
    return int(m[1]), int(m[2]), int(m[3])


def test_admission_keeps_every_listener_in_audio_where_without_it_they_run_dry(capsys):
    assert main(["--listeners", "24", *SMALL, "--no-admission"]) == 0
    admitted, refused, late = counts(capsys.readouterr().out)
    assert (admitted, refused) == (24, 0) and late > 0
    assert main(["--listeners", "24", *SMALL]) == 0
    admitted, refused, late = counts(capsys.readouterr().out)
    assert 4 <= admitted < 24 and refused == 24 - admitted and late == 0


def test_a_codec_on_a_thread_holds_each_chunk_until_its_job_is_done(capsys):
    """With a codec thread beside the LLM (jobs of 20 ms + 1 ms a row), the same device's
    admission still keeps every admitted listener in audio."""
    assert main(["--listeners", "24", *SMALL, "--codec-ms", "20,1"]) == 0
    admitted, refused, late = counts(capsys.readouterr().out)
    assert 4 <= admitted < 24 and refused == 24 - admitted and late == 0


def test_bad_arguments_are_refused_with_a_message(capsys):
    for bad in (
        ["--listeners", "0"],
        ["--turn-ms", "3"],
        ["--listeners", "a"],
        ["--codec-ms", "20"],
        ["--codec-ms=-1,0"],
        ["--delivery-ms", "40"],
        ["--delivery-ms=40,-1"],
        ["--ridge", "256"],
        ["--ridge=256,-1"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--turn-ms" in err and "--codec-ms takes costs >= 0" in err
    assert "--delivery-ms MEAN,SD" in err and "--delivery-ms takes times >= 0" in err
    assert "--ridge ROWS,PER_ROW" in err and "--ridge takes rows and a cost >= 0" in err


def test_bent_turns_keep_admission_on_a_device_past_its_ridge(monkeypatch, capsys):
    """Orpheus on an H200-like device whose turns, and bursts, grow 0.02 ms a row faster past
    256 rows (--ridge): 380 listeners collapse with admission off; the turn model's bend
    (engine/turn_cost.py) lets in what holds and none runs late, where the line alone let in
    more and they ran late."""
    import engine.turn_cost as turn_cost

    h200 = [
        "--listeners", "380", "--turn-ms", "3.26,0.0053", "--page-us", "0.224",
        "--noise-ms", "0.3", "--codec-ms", "6.5,0.9", "--delivery-ms", "20,10",
        "--arrival-ms", "1.5", "--max-num-seqs", "336", "--ridge", "256,0.02",
    ]  # fmt: skip

    def run(*extra: str) -> tuple[int, int, int]:
        assert main([*h200, *extra]) == 0
        return counts(capsys.readouterr().out)

    assert run("--no-admission")[2] > 300
    admitted, _, late = run()
    assert late == 0 and 280 <= admitted <= 330
    monkeypatch.setattr(turn_cost, "_bend", lambda sizes, seconds, live, rows: 0 * rows)
    assert run()[2] > 0


def test_the_way_to_the_listener_makes_chunks_late_by_its_spread_not_its_length(capsys):
    """A chunk's way from the codec to its listener (--delivery-ms): a constant one delays the
    listener's whole timeline alike and leaves every verdict the engine's own; one that varies
    makes chunks late where the engine had them in time. Without admission, on a device that
    falls behind a little at the streams' end."""
    overloaded = [
        "--listeners", "40", "--stream-s", "6", "--stagger-s", "4", "--turn-ms", "6,0.2",
        "--noise-ms", "0.3", "--codec-ms", "4,0.5", "--max-num-seqs", "64", "--no-admission",
    ]  # fmt: skip
    outs = []
    for way in ([], ["--delivery-ms", "40,0"], ["--delivery-ms", "40,40"]):
        assert main([*overloaded, *way]) == 0
        outs.append(capsys.readouterr().out)
    engine, constant, varying = (counts(out)[2] for out in outs)
    worst = [re.search(r"worst lead (-?[0-9.]+) s", out)[1] for out in outs]
    assert 0 < engine == constant < varying
    assert worst[0] == worst[1] and float(worst[2]) < float(worst[0])
