"""The frame-synchronous scheduler on a fake clock: one batch per tick, late input padded with
silence, early input dropped to the bound, resync when the engine falls behind, sessions
joining and leaving between frames (no torch)."""

from __future__ import annotations

from engine.frame_scheduler import FrameScheduler

F = 0.08


def live_ids(plan):
    return [s.session_id for s in plan.live]


def test_sessions_step_together_once_per_frame():
    s = FrameScheduler(F)
    s.join("a")
    assert s.plan(0.0) is None  # no input yet: nothing to step
    s.push_frames("a", 1)
    p0 = s.plan(0.0)
    assert p0.priming == ["a"] and p0.live == []
    s.finish(p0, 0.01)
    s.join("b")
    s.push_frames("b", 1)
    assert s.plan(0.05) is None  # the next tick is due at 0.08
    s.push_frames("a", 1)
    p1 = s.plan(0.08)
    assert live_ids(p1) == ["a"] and p1.priming == ["b"] and p1.due == 0.08
    s.finish(p1, 0.1)
    s.push_frames("a", 1)
    p2 = s.plan(0.16)
    assert live_ids(p2) == ["a", "b"] and all(x.use_input for x in p2.live)
    s.finish(p2, 0.2)
    assert s.stats("a").on_time == 2 and s.stats("b").on_time == 1
    s.leave("a")
    p3 = s.plan(0.24)
    assert live_ids(p3) == ["b"] and not p3.live[0].use_input  # b sent nothing: silence
    assert s.stats("b").input_late == 1


def test_late_frame_is_buffered_and_early_frames_are_dropped():
    s = FrameScheduler(F, max_input_frames=2)
    s.join("a")
    s.push_frames("a", 1)
    s.finish(s.plan(0.0), 0.0)  # primed
    p = s.plan(0.08)
    assert p.live[0].use_input
    s.finish(p, 0.09)
    p = s.plan(0.16)  # nothing arrived in time
    assert not p.live[0].use_input
    s.finish(p, 0.17)
    s.push_frames("a", 2)  # the late frame and the current one
    p = s.plan(0.24)
    assert p.live[0].use_input and p.live[0].drop_before == 0
    s.finish(p, 0.25)
    s.push_frames("a", 5)  # a burst: 6 queued, bound 2
    p = s.plan(0.32)
    assert p.live[0].drop_before == 4 and p.live[0].use_input
    assert s.stats("a").input_dropped == 4


def test_late_steps_are_counted_and_a_far_behind_grid_resyncs():
    s = FrameScheduler(F, max_catch_up_frames=2)
    s.join("a")
    s.push_frames("a", 10)
    s.finish(s.plan(0.0), 0.0)
    p = s.plan(0.08)
    s.finish(p, 0.08 + F + 0.03)  # finished 30 ms after the frame was needed
    stats = s.stats("a")
    assert stats.late == 1 and abs(stats.max_late_s - 0.03) < 1e-9
    p = s.plan(0.2)  # 40 ms late: within the catch-up bound, the grid holds
    assert p.due == 0.16 and s.resyncs == 0
    s.finish(p, 0.21)
    p = s.plan(1.0)  # 760 ms late: resync to now
    assert p.due == 1.0 and s.resyncs == 1
    s.finish(p, 1.01)
    assert s.plan(1.05) is None and s.plan(1.08) is not None


def test_grid_restarts_when_the_last_session_leaves():
    s = FrameScheduler(F)
    s.join("a")
    s.push_frames("a", 1)
    s.finish(s.plan(5.0), 5.0)
    s.leave("a")
    s.join("b")
    s.push_frames("b", 1)
    p = s.plan(7.03)
    assert p.due == 7.03 and p.priming == ["b"]
