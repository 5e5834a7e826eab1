#!/usr/bin/env python3
"""Where the suite's time goes: per-file and per-test seconds from a pytest ``--junitxml`` report.

    tools/run_tests.sh --junitxml=out/tests.xml
    .venv/bin/python tools/test_durations.py out/tests.xml              # the slowest files and tests
    .venv/bin/python tools/test_durations.py out/tests.xml --write-schedule

``--write-schedule`` rewrites ``test/schedule.txt``: the slowest files, longest first, which
``test/conftest.py`` hands to the test workers first so that both finish at about the same time
(with ``--dist loadfile`` a long file started last is the run's tail). Only the order of files
depends on it, never a verdict.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE = ROOT / "test" / "schedule.txt"
HEADER = """\
# The slowest test files, longest first (seconds in the last measured run). test/conftest.py starts
# them first so the workers finish together; only the order depends on this file, never a verdict.
# Regenerate: tools/run_tests.sh --junitxml=out/tests.xml; tools/test_durations.py out/tests.xml --write-schedule
"""


def per_file(report: Path) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """Seconds per test file and per test (setup + call + teardown, as junitxml reports them)."""
    files: dict[str, float] = collections.defaultdict(float)
    tests: list[tuple[float, str]] = []
    for case in ET.parse(report).iter("testcase"):
        seconds = float(case.get("time") or 0.0)
        path = (case.get("classname") or "").replace(".", "/") + ".py"
        files[path] += seconds
        tests.append((seconds, f"{path}::{case.get('name')}"))
    return dict(files), sorted(tests, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a pytest --junitxml file")
    parser.add_argument("--top", type=int, default=15, help="how many files and tests to list")
    parser.add_argument("--write-schedule", action="store_true", help="rewrite the schedule file (--schedule)")
    parser.add_argument("--schedule", type=Path, default=SCHEDULE, help="default: test/schedule.txt")
    parser.add_argument("--schedule-files", type=int, default=30, help="files kept in the schedule")
    args = parser.parse_args(argv)
    if not args.report.is_file():
        parser.error(f"{args.report} does not exist: run the suite with --junitxml={args.report} first")
    files, tests = per_file(args.report)
    ranked = sorted(files.items(), key=lambda item: -item[1])
    print(f"{sum(files.values()):.0f} s in {len(tests)} tests ({len(files)} files); slowest files:")
    for path, seconds in ranked[: args.top]:
        print(f"{seconds:8.1f} s  {path}")
    print("slowest tests:")
    for seconds, name in tests[: args.top]:
        print(f"{seconds:8.1f} s  {name}")
    if args.write_schedule:
        lines = [f"{path}  # {seconds:.0f} s" for path, seconds in ranked[: args.schedule_files]]
        args.schedule.write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {args.schedule} ({len(lines)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
