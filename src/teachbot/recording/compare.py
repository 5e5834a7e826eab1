"""Compare a replayed session with its recording: transcript, robot utterances, LLM calls, final world. ROS-free."""

from __future__ import annotations

from dataclasses import dataclass

from teachbot.recording.bag import SESSION_END, RecordedSession, WorldRecord

POSITION_TOLERANCE = 0.02  # metres: physics at another real-time factor settles objects a little differently


@dataclass(frozen=True)
class Difference:
    """One way the replay differs from the recording."""

    what: str     # "transcript", "dialog", "completions", "world"
    detail: str

    def render(self) -> str:
        """One line (or a few) for the report."""
        return f"{self.what}: {self.detail}"


def compare_transcripts(recorded: list[str], replayed: list[str]) -> Difference | None:
    """The first differing line. A recording cut off by Ctrl-C has no final ``SessionEnded`` line; the
    replay (whose person leaves when the recorded utterances run out) may add exactly that."""
    if len(replayed) == len(recorded) + 1 and not (recorded and recorded[-1].startswith(SESSION_END)) \
            and replayed[-1].startswith(SESSION_END):
        replayed = replayed[:-1]
    for index, (want, got) in enumerate(zip(recorded, replayed)):
        if want != got:
            return Difference("transcript", f"line {index + 1} differs:\n  recorded: {want}\n  replayed: {got}")
    if len(recorded) != len(replayed):
        shorter, extra = ("replay", recorded[len(replayed)]) if len(replayed) < len(recorded) else ("recording", replayed[len(recorded)])
        return Difference("transcript", f"the {shorter} stops after {min(len(recorded), len(replayed))} lines; next line: {extra}")
    return None


def compare_worlds(recorded: WorldRecord, replayed: WorldRecord, tolerance: float = POSITION_TOLERANCE) -> list[Difference]:
    """Same objects, same relations (exact), positions within ``tolerance`` metres."""
    out: list[Difference] = []
    want, got = recorded.by_name(), replayed.by_name()
    if set(want) != set(got):
        out.append(Difference("world", f"objects differ: recorded {sorted(want)}, replayed {sorted(got)}"))
    for name in sorted(set(want) & set(got)):
        a, b = want[name], got[name]
        for attribute in ("supported_by", "inside", "held"):
            if getattr(a, attribute) != getattr(b, attribute):
                out.append(Difference("world", f"{name}.{attribute}: recorded {getattr(a, attribute)!r}, "
                                               f"replayed {getattr(b, attribute)!r}"))
        distance = sum((p - q) ** 2 for p, q in zip(a.position, b.position)) ** 0.5
        if distance > tolerance:
            out.append(Difference("world", f"{name} is {distance * 100:.1f} cm from its recorded position "
                                           f"(tolerance {tolerance * 100:.0f} cm)"))
    if recorded.held_object != replayed.held_object:
        out.append(Difference("world", f"held object: recorded {recorded.held_object!r}, replayed {replayed.held_object!r}"))
    return out


def compare_sessions(recorded: RecordedSession, replayed: RecordedSession,
                     tolerance: float = POSITION_TOLERANCE) -> list[Difference]:
    """Every difference between a recording and its replay; empty when the replay reproduced it."""
    out: list[Difference] = []
    transcript = compare_transcripts(recorded.transcript, replayed.transcript)
    if transcript:
        out.append(transcript)
    if recorded.robot != replayed.robot:
        out.append(Difference("dialog", f"the robot said {replayed.robot!r}; recorded {recorded.robot!r}"))
    for role in sorted({c.role for c in recorded.completions} | {c.role for c in replayed.completions}):
        want = [c.prompt_digest for c in recorded.completions_for(role)]
        got = [c.prompt_digest for c in replayed.completions_for(role)]
        if want != got:
            out.append(Difference("completions", f"{role}: {len(got)} prompts replayed, {len(want)} recorded"
                                  + ("" if len(want) != len(got) else " (same count, other digests or order)")))
    if recorded.final_world and replayed.final_world:
        out.extend(compare_worlds(recorded.final_world, replayed.final_world, tolerance))
    elif recorded.final_world:
        out.append(Difference("world", "the replay has no final world state"))
    return out
