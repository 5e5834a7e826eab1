"""``teachbot replay BAG --check``: the recorded session again, in simulation, with no LLM and no person.

The stack is rebuilt from the bag's session record (robot, scene, console settings, seed memory with
an empty learned store in a temporary directory); the LLM roles answer from the recorded completions
matched by prompt digest (teachbot.llm.replay_model), the person says the recorded utterances
whenever the console waits for them, and the simulator runs as fast as it can. The replay is itself
recorded (to a temporary bag unless ``out`` is given) and compared with the original: transcript line
by line, the robot's words, the LLM calls, the final world state (relations exact, positions within
2 cm). The first prompt that differs from the recording stops the replay and is reported with a diff.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachbot.llm.replay_model import Divergence, ReplayModel
from teachbot.nodes.console_stack import ConsoleStack, run_conversation
from teachbot.recording.bag import RecordedSession
from teachbot.recording.compare import POSITION_TOLERANCE, Difference, compare_sessions

ROLES = ("interaction", "function_generation", "improvement", "correction")


@dataclass
class ReplayReport:
    """What a replay found; ``ok`` when nothing diverged and (with ``check``) nothing differs."""

    bag: Path
    recorded: RecordedSession
    replayed: RecordedSession | None = None
    divergence: Divergence | None = None
    differences: list[Difference] = field(default_factory=list)
    wall: float = 0.0            # seconds, start-up included
    conversation_wall: float = 0.0   # seconds from the console's start to the person leaving
    finished: bool = False       # the conversation reached its end (the person left)

    @property
    def ok(self) -> bool:
        """No divergence, the conversation finished, no difference found."""
        return self.divergence is None and self.finished and not self.differences

    def render(self) -> str:
        """The verdict for a terminal, several lines."""
        if self.divergence is not None:
            return f"DIVERGED: {self.divergence.render()}"
        lines = [] if self.finished else ["DIVERGED: the replayed conversation did not reach its end in time"]
        lines += [f"DIFFERS {d.render()}" for d in self.differences]
        if not lines:
            count = len(self.recorded.transcript)
            lines.append(f"OK: {count} transcript lines, {len(self.recorded.completions)} LLM completions and the final "
                         f"world state reproduced ({self.conversation_wall:.1f} s; recorded {conversation_span(self.recorded):.1f} s)")
        return "\n".join(lines)


def conversation_span(session: RecordedSession) -> float:
    """Seconds from the first to the last LLM completion of a recording (its conversation's length)."""
    stamps = [c.stamp_ns for c in session.completions]
    return (max(stamps) - min(stamps)) * 1e-9 if len(stamps) > 1 else 0.0


def replay(
    bag: str | Path,
    *,
    check: bool = True,
    out: str | Path | None = None,
    on_line: Callable[[str], None] | None = None,
    camera: bool = False,
    on_started: Callable[[ConsoleStack], None] | None = None,
    real_time_factor: float = 0.0,
    timeout: float = 300.0,
    tolerance: float = POSITION_TOLERANCE,
) -> ReplayReport:
    """Replay one recorded session; see the module docstring. ``on_started`` runs once sim and skills are
    up, before the console starts (e.g. to attach a camera grabber)."""
    started = time.monotonic()
    recorded = RecordedSession.load(bag)
    report = ReplayReport(Path(bag), recorded)
    diverged = threading.Event()

    def on_divergence(divergence: Divergence) -> None:
        if report.divergence is None:
            report.divergence = divergence
        diverged.set()

    models = {role: ReplayModel(role, recorded.completions_for(role), on_divergence) for role in ROLES}
    console = ConsoleStack(recorded.spec, interaction_model=models["interaction"], function_model=models["function_generation"],
                           improvement_model=models["improvement"], correction_model=models["correction"],
                           real_time_factor=real_time_factor, camera=camera)
    scratch = tempfile.TemporaryDirectory(prefix="teachbot-replay-") if out is None else None
    replay_bag = Path(scratch.name) / "replay" if scratch else Path(out)
    try:
        console.start()
        console.record(replay_bag)
        if on_started is not None:
            on_started(console)
        t0 = time.monotonic()
        person = run_conversation(console, recorded.user, timeout=timeout, on_line=on_line, abort=diverged)
        report.conversation_wall = time.monotonic() - t0
        report.finished = person.finished.is_set() and not diverged.is_set()
        console.recording.stop()
        report.replayed = RecordedSession.load(replay_bag)
        if check and report.divergence is None:
            report.differences = compare_sessions(recorded, report.replayed, tolerance)
    finally:
        console.stop()
        if scratch is not None:
            scratch.cleanup()
    report.wall = time.monotonic() - started
    return report


def replay_many(bag: str | Path, times: int, **kwargs: Any) -> list[ReplayReport]:
    """``times`` replays of one bag, one after another (determinism checks)."""
    return [replay(bag, **kwargs) for _ in range(times)]
