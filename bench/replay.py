#!/usr/bin/env python3
"""Replay speed of a shipped bag against its recorded duration, and the recorder's overhead per console step.

Replay: ``--runs`` replays of test/bags/<bag> (default learning_episode), each timed whole (process
work from loading the bag to the stack stopped: start-up with the embedding model's import included)
and for the conversation, measured the same way in the recording and in the replay's own recording:
first to last LLM completion. Headline: recorded conversation / replayed conversation (goal: at least
5x faster); also whole: the bag's span (recorder start to stop) / the whole replay.

Recording overhead: the console (no memory nodes) runs 40 scripted assignment statements with and
without the recorder in the same process; per step = wall time between consecutive transcript lines.

Usage: python bench/replay.py [--runs 3] [--bag NAME] [--steps 40] [--smoke]
"""

from __future__ import annotations

import statistics
import time

import _common as C

C.setup()

GOAL_SPEEDUP = 5.0


def _overhead_run(record: bool, steps: int, workdir: str) -> list[float]:
    """Per-step wall times (s) of a console session of ``steps`` scripted statements."""
    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.console_stack import ConsoleStack, run_conversation
    from teachbot.recording.bag import SessionSpec
    from teachbot.recording.scripted_sessions import SCENE

    statements = [*(f"x = {i}" for i in range(steps)), "wait_for_trigger()"]  # the console opens with a wait itself
    spec = SessionSpec(scene_yaml=SCENE, memory=False, interaction={"dialog_timeout": 60.0, "session": {"max_rounds": steps + 10}})
    console = ConsoleStack(spec, interaction_model=ScriptedModel(statements), function_model=ScriptedModel([]), real_time_factor=0.0)
    stamps: list[float] = []

    def on_line(line: str) -> None:
        if line.startswith(">>> x = "):
            stamps.append(time.perf_counter())

    try:
        console.start()
        if record:
            console.record(f"{workdir}/overhead_{time.monotonic_ns()}")
        run_conversation(console, ["go"], timeout=120.0, on_line=on_line)
    finally:
        console.stop()
    return [b - a for a, b in zip(stamps, stamps[1:])]


def main() -> None:
    p = C.parser(__doc__.splitlines()[0], runs=3, smoke={"runs": 1, "steps": 5, "bag": "plain_task"})
    p.add_argument("--bag", default="learning_episode", help="bag under test/bags/ (default learning_episode)")
    p.add_argument("--steps", type=int, default=40, help="console statements per overhead run")
    args = p.parse_args()
    import tempfile

    from teachbot.nodes.replay_check import conversation_span, replay
    from teachbot.recording.bag import RecordedSession

    bag = C.REPO / "test" / "bags" / args.bag
    recorded = RecordedSession.load(bag)
    whole, talk = [], []
    for run in range(args.runs):
        report = replay(bag, check=True)
        if not report.ok:
            raise SystemExit(f"replay {run + 1} of {args.bag} failed:\n{report.render()}")
        whole.append(report.wall)
        talk.append(conversation_span(report.replayed))  # same measure as the recording's: first to last LLM call
        C.say(f"replay {run + 1}: {report.wall:.2f} s whole, {talk[-1]:.2f} s conversation "
              f"(first to last LLM call; {report.conversation_wall:.2f} s from the console's start)")
    speedup_whole = recorded.duration / statistics.median(whole)
    speedup_talk = conversation_span(recorded) / statistics.median(talk)
    C.say(f"{args.bag}: recorded {recorded.duration:.2f} s (conversation {conversation_span(recorded):.2f} s); "
          f"replay median {statistics.median(whole):.2f} s whole ({speedup_whole:.2f}x), "
          f"{statistics.median(talk):.2f} s conversation ({speedup_talk:.2f}x); goal {GOAL_SPEEDUP:g}x")

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as workdir:
        plain = [s for _ in range(args.runs) for s in _overhead_run(False, args.steps, workdir)]
        recorded_steps = [s for _ in range(args.runs) for s in _overhead_run(True, args.steps, workdir)]
    base, with_rec = statistics.median(plain) * 1e3, statistics.median(recorded_steps) * 1e3
    C.say(f"console step: median {base:.2f} ms without the recorder, {with_rec:.2f} ms with it "
          f"({with_rec - base:+.2f} ms, {with_rec / base:.2f}x)")
    C.emit({
        "benchmark": "replay",
        "bag": args.bag,
        "recorded_duration_s": round(recorded.duration, 3),
        "recorded_conversation_s": round(conversation_span(recorded), 3),
        "replay_whole_s": C.summary(whole),
        "replay_conversation_s": C.summary(talk),
        "headline": "speedup_conversation (first to last LLM completion, recording vs replay)",
        "speedup_whole": round(speedup_whole, 3),
        "speedup_conversation": round(speedup_talk, 3),
        **C.goal_fields(speedup_talk, GOAL_SPEEDUP, lower_is_better=False),
        "console_step_ms": {"without_recorder": C.summary(s * 1e3 for s in plain),
                            "with_recorder": C.summary(s * 1e3 for s in recorded_steps)},
        "recording_overhead_ms": round(with_rec - base, 3),
        "recording_overhead_ratio": round(with_rec / base, 4),
        "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
