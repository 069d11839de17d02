"""`voxgate bench --conversations N1,N2,…`: how many spoken turn-based conversations one server
holds at once (GLM-4-Voice, Step-Audio 2: models whose `session.started` says `model_kind:
turns`).

For each N (ascending), N conversations open evenly over `--stagger` seconds; each speaks real
speech clips as microphone frames in real time, ends each turn by silence (the server's VAD,
`--vad-silence-ms`) or `input.commit` (`--vad-silence-ms 0`), hears the whole reply while
playing it from its first frame, thinks `--think-seconds`, and speaks again, for
`--turns-each` turns or `--conversation-seconds` (voxbench/conversations.py). The **reply
latency** is the first reply frame's arrival minus the end of the user's speech (the clip's
last frame sent), whichever way the turn ends: with VAD it includes the silence the server
waits for. A point **holds** when no conversation was refused or failed, at least
`--min-on-time` of the reply frames asked for arrived by their playback deadline and the p90
reply latency is within `--slo-ttfa-ms` (500 ms): the rule and the server-side profile of
`--capacity` (voxbench/ladder.py). Results go to
`bench/results/<date>-<machine>-<model>-turns.json` (schema `voxgate-turn-capacity/1`) with
a plot of N against on-time frames and p90 reply latency.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voxbench.conversations import (
    ConversationOptions,
    play_conversations,
    staggered_conversations,
)
from voxbench.ladder import FrameCount, LadderConfig, LadderRun, plot_ladder, point_holds
from voxbench.loadgen import ClientOptions, probe_session
from voxbench.metrics import distribution, underrun
from voxbench.turn_records import ConversationRecord
from voxbench.turn_speech import DEFAULT_SPEECH_DIR, load_clips, mic_turns, room_packets
from voxbench.workload import tokens_for

log = logging.getLogger("voxgate.bench")
SCHEMA = "voxgate-turn-capacity/1"


@dataclass(frozen=True)
class TurnCapacityConfig(LadderConfig):
    turns_each: int | None = 3  # None: as many turns as `conversation_s` holds
    conversation_s: float | None = None
    reply_s: float = 6.0  # each reply: min_tokens = max_tokens = reply_s × the token rate
    think_s: float = 1.0
    vad_silence_ms: int | None = 200  # None: turn detection `none`, turns end by input.commit
    input_audio: tuple[tuple[str, Any], ...] = (
        ("format", "opus"),
        ("sample_rate", 48000),
        ("frame_ms", 20),
    )
    turn_audio: tuple[str, ...] = ()  # clips or folders; () the committed flite clips
    token_rate: float | None = None

    def __post_init__(self) -> None:
        self.check("--conversations", "8,16,32")
        if (self.turns_each is None) == (self.conversation_s is None):
            raise ValueError("give --turns-each or --conversation-seconds, not both")
        if (self.turns_each or 1) < 1 or (self.conversation_s or 1) <= 0:
            raise ValueError("--turns-each must be >= 1 and --conversation-seconds > 0")
        if self.reply_s <= 0 or self.think_s < 0:
            raise ValueError("--reply-seconds must be > 0 and --think-seconds >= 0")
        if self.vad_silence_ms is not None and self.vad_silence_ms < 20:
            raise ValueError("--vad-silence-ms must be >= 20 (0: end turns with input.commit)")

    def settings(self) -> dict[str, Any]:
        data = super().settings()
        data["input_audio"] = dict(self.input_audio)
        data["turn_end"] = "input.commit" if self.vad_silence_ms is None else "vad"
        return data


# --- one point's verdict ----------------------------------------------------------------------
def _reply_refused(conversation: ConversationRecord) -> bool:
    return any(e.get("code") == "overloaded" for t in conversation.turns for e in t.errors)


def summarize_turns(
    conversations: list[ConversationRecord],
    buffer_ms: float,
    min_on_time: float,
    p90_latency_ms: float,
    asked_frames: int,
) -> dict[str, Any]:
    """Reply latency (from the end of the user's speech), frames on time over every reply frame
    asked for (a missing reply's `asked_frames` count as late: a turn refused, broken or never
    taken because its conversation broke), stalls per reply, and whether the point holds."""
    frames = FrameCount()
    latency, turn_end, after_end, stalls, stall_ms, audio = [], [], [], [], [], []
    turns = completed = speech_events = 0
    for c in conversations:
        for t in c.turns:
            turns += 1
            asked = round(t.audio_seconds * 1000 / (t.frame_ms or 20.0))
            frames.add(t.arrivals_ms, t.frame_durations_ms(), buffer_ms, t.ok, asked)
            speech_events += t.speech_events
            if t.reply_latency_ms is not None:
                latency.append(t.reply_latency_ms)
                if t.turn_end_ms is not None:
                    after_end.append(t.reply_latency_ms - t.turn_end_ms)
            if t.turn_end_ms is not None:
                turn_end.append(t.turn_end_ms)
            if t.ok:
                completed += 1
                audio.append(t.received_audio_ms)
                ms, n = underrun(t.arrivals_ms, t.frame_durations_ms(), buffer_ms)
                stalls.append(n)
                stall_ms.append(ms)
        for _ in range(c.turns_planned - len(c.turns)):
            frames.add([], [], buffer_ms, False, asked_frames)
    refused = sum(1 for c in conversations if c.refused or _reply_refused(c))
    failed = sum(1 for c in conversations if not c.ok) - refused
    counted = frames.summary()
    return {
        "conversations": len(conversations),
        "started": sum(1 for c in conversations if c.started_s is not None),
        "refused": refused,
        "failed": failed,
        "failures": dict(Counter(c.failure for c in conversations if not c.ok)),
        "turns_planned": sum(max(c.turns_planned, len(c.turns)) for c in conversations),
        "turns": turns,
        "turns_completed": completed,
        "speech_events": speech_events,
        "reply_latency_ms": distribution(latency),
        "turn_end_ms": distribution(turn_end),
        "reply_after_turn_end_ms": distribution(after_end),
        "reply_audio_ms": distribution(audio),  # what the answered replies held
        **counted,
        "late_replies": frames.late_streams,
        "underruns_per_reply": distribution(stalls),
        "underrun_ms_total": round(sum(stall_ms), 1),
        "replies_with_underrun": sum(1 for n in stalls if n),
        "holds": point_holds(refused, failed, frames, latency, min_on_time, p90_latency_ms),
    }


# --- the run ------------------------------------------------------------------------------------
class TurnCapacityRun(LadderRun):
    schema, suffix, count_key = SCHEMA, "turns", "conversations"

    def __init__(self, cfg: TurnCapacityConfig, argv: list[str]) -> None:
        super().__init__(cfg, argv)
        self.cfg: TurnCapacityConfig = cfg
        clips = load_clips([Path(p) for p in cfg.turn_audio])
        self.turns = tuple(mic_turns(clips, dict(cfg.input_audio)))
        self.room = room_packets(dict(cfg.input_audio), seed=cfg.seed)
        self.token_rate = cfg.token_rate
        self.results["settings"]["speech"] = {
            "source": ", ".join(cfg.turn_audio) or str(DEFAULT_SPEECH_DIR),
            "clips": {t.name: round(t.speech_s, 3) for t in self.turns},
        }

    def _options(self, url: str, **changes: Any) -> ConversationOptions:
        c = self.cfg
        assert self.token_rate is not None
        opts = ConversationOptions(
            url,
            dict(c.input_audio),
            dict(c.output_audio),
            self.turns,
            self.room,
            c.reply_s,
            tokens_for(c.reply_s, self.token_rate),
            vad_silence_ms=c.vad_silence_ms,
            turns_each=c.turns_each,
            seconds=c.conversation_s,
            think_s=c.think_s,
            buffer_ms=c.buffer_ms,
            api_key=c.api_key,
            reply_timeout_s=c.drain_timeout_s,
        )
        if "reply_s" in changes:
            changes["tokens"] = tokens_for(changes["reply_s"], self.token_rate)
        return dataclasses.replace(opts, **changes)

    def prepare(self, url: str) -> None:
        """The served model must take turns; its token rate sets the replies' length. One
        conversation of one short turn warms the server up."""
        c = self.cfg
        started = probe_session(ClientOptions(url, dict(c.output_audio), api_key=c.api_key))
        kind = started.get("model_kind")
        if kind != "turns":
            raise RuntimeError(
                f"{url} serves {started.get('model')!r}, a {kind!r} model: --conversations "
                "needs a turn-based speech-to-speech model (GLM-4-Voice, Step-Audio 2); use "
                "--capacity for TTS and full-duplex models"
            )
        self.token_rate = self.token_rate_of(started, url, self.token_rate)
        warm = self._options(url, reply_s=1.0, turns_each=1, seconds=None, reply_timeout_s=300.0)
        [record], _, _ = self.gen.play(play_conversations, staggered_conversations(1, 0.0), warm)
        if not record.ok:
            errors = [e for t in record.turns for e in t.errors]
            said = f": {errors[-1]['code']}: {errors[-1]['message']}" if errors else ""
            raise RuntimeError(
                f"the warm-up conversation at {url} was not answered ({record.failure}{said})"
            )

    def measure(self, url: str, n: int) -> dict[str, Any]:
        c = self.cfg
        plan = staggered_conversations(n, c.stagger_s)
        records, client, wall_s = self.gen.play(play_conversations, plan, self._options(url))
        records.sort(key=lambda r: r.index)
        frame_ms = dict(c.output_audio).get("frame_ms", 20)
        asked = round(c.reply_s * 1000 / frame_ms)
        summary = summarize_turns(records, c.buffer_ms, c.min_on_time, c.p90_ttfa_ms, asked)
        return {
            "conversations": n,
            "summary": summary,
            "wall_s": wall_s,
            "client": client,
            "records": [r.to_json() for r in records],
        }

    def describe(self, n: int, summary: dict[str, Any]) -> str:
        s = summary
        return (
            f"{n} conversations: {s['turns_completed']}/{s['turns_planned']} turns answered, "
            f"reply latency p50 {s['reply_latency_ms']['p50']} / p90 "
            f"{s['reply_latency_ms']['p90']} ms after the end of speech, "
            f"{100 * s['on_time']:.2f}% of frames on time ({s['late_replies']} late replies), "
            f"{s['refused']} refused, {s['failed']} failed: "
            + ("HOLDS" if s["holds"] else "does not hold")
        )

    def plot(self) -> Path | None:
        settings = self.results["settings"]
        turns = (
            f"{settings['turns_each']} turns"
            if settings["turns_each"]
            else f"{settings['conversation_s']:g} s"
        )
        return plot_ladder(
            self.results,
            self.path,
            "conversations",
            lambda summary: summary["reply_latency_ms"]["p90"],
            "p90 reply latency (ms after the end of speech)",
            f"conversations (opened over {settings['stagger_s']:g} s, {turns} each, "
            f"{settings['reply_s']:g}-s replies, turn end: {settings['turn_end']})",
            "spoken conversations",
        )
