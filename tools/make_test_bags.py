"""Record the shipped session bags (test/bags/<name>/) from the scripted sessions, with the project's own
recorder, in real time (real_time_factor 1, as a live session runs).

    .venv/bin/python tools/make_test_bags.py            # all sessions, replacing test/bags/*
    .venv/bin/python tools/make_test_bags.py plain_task # one

Re-run it whenever prompts/, memory_store/ seeds, config/ or the console change what the LLM is
asked: the replay tests compare prompt digests, so old bags then (rightly) report a divergence.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from teachbot.ros_env import configure_loopback  # noqa: E402

configure_loopback()

from teachbot.llm.scripted import ScriptedModel  # noqa: E402
from teachbot.nodes.console_stack import ConsoleStack, run_conversation  # noqa: E402
from teachbot.recording.bag import RecordedSession, SessionSpec  # noqa: E402
from teachbot.recording.scripted_sessions import SESSIONS, ScriptedSession  # noqa: E402

BAGS = ROOT / "test" / "bags"


def record(session: ScriptedSession, path: Path, storage: str = "mcap", real_time_factor: float = 1.0) -> RecordedSession:
    """Run one scripted session in simulation and record it into ``path`` (replaced if it exists)."""
    if path.exists():
        shutil.rmtree(path)
    spec = SessionSpec(robot_profile=session.robot_profile, scene_yaml=session.scene_yaml,
                       interaction=dict(session.interaction_overrides),
                       real_time_factor=real_time_factor, title=session.title)
    console = ConsoleStack(spec, interaction_model=ScriptedModel(session.interaction, name="interaction:scripted"),
                           function_model=ScriptedModel([], name="function_generation:scripted"),
                           improvement_model=ScriptedModel(session.improvement, name="improvement:scripted"),
                           correction_model=ScriptedModel(session.correction, name="correction:scripted"))
    try:
        console.start()
        console.record(path, storage=storage)
        person = run_conversation(console, session.person, timeout=240.0, on_line=lambda line: print(f"  {line}", flush=True))
        if not person.finished.is_set():
            raise SystemExit(f"{session.name}: the scripted conversation did not end within 240 s")
    finally:
        console.stop()
    return RecordedSession.load(path)


def main(argv: list[str] | None = None) -> int:
    """Record the named sessions (all by default) into test/bags/."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"sessions to record (default: all of {', '.join(SESSIONS)})")
    parser.add_argument("--out", default=str(BAGS), help="directory of the bags (default test/bags)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(SESSIONS))
    if unknown:
        parser.error(f"unknown session(s) {', '.join(unknown)}; known: {', '.join(SESSIONS)}")
    for name in args.names or list(SESSIONS):
        started = time.monotonic()
        print(f"recording {name} ...", flush=True)
        recorded = record(SESSIONS[name], Path(args.out) / name, args.storage)
        size = sum(f.stat().st_size for f in recorded.path.iterdir())
        print(f"{name}: {len(recorded.transcript)} transcript lines, {len(recorded.completions)} completions, "
              f"{recorded.duration:.1f} s recorded, {size / 1024:.0f} KiB, took {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
