"""Every benchmark still runs: each bench/[!_]*.py in its tiny mode (``--smoke``) as a child process, its last line
of stdout one JSON object with the fields its goals need (test/fixtures/bench_smoke.yaml), all finite numbers.

The verdict never depends on the machine's speed: the figures of a tiny run on a busy machine mean nothing, so no
goal is checked, only that the benchmark gets to its JSON line and that the line holds what a full run reports;
each run may take minutes before it counts as hung. A new benchmark is picked up by the glob and fails here until
it has a tiny mode and a row in the table.

Most of a tiny run is waiting (process and node start-ups, model loads, a fake endpoint's pauses), so the runs go
TEACHBOT_BENCH_SMOKE_JOBS at a time (default 2; 1: one after another), the longest first, each on a ROS domain of
its own. All of this module's tests must run in one process (tools/run_tests.sh's ``--dist loadfile`` does that).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pg_server import bin_dir_for

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
TABLE: dict[str, dict[str, Any]] = yaml.safe_load((ROOT / "test" / "fixtures" / "bench_smoke.yaml").read_text())
BENCHES = sorted(p.stem for p in BENCH.glob("[!_]*.py"))
JOBS = max(1, int(os.environ.get("TEACHBOT_BENCH_SMOKE_JOBS", "2")))
DEFAULT_TIMEOUT = 300.0  # seconds for one tiny run; they take seconds to a minute
GRACE = 20.0  # seconds between SIGTERM (the bench stops its children) and SIGKILL of its process group
WAIT = 3600.0  # seconds a test may wait for its run: the runs before it in the queue, then its own

# optional system pieces a benchmark may need: name -> (present?, the reason to skip without it)
NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "chromium": (lambda: bool(shutil.which("chromium") and shutil.which("chromedriver")),
                 "Debian's chromium and chromium-driver are not installed (make setup installs them when run as root: "
                 "apt-get install chromium chromium-driver)"),
    "pgvector": (lambda: bin_dir_for("pgvector") is not None,
                 "pgserver's PostgreSQL with pgvector is not installed (make setup; pip install pgserver)"),
}


def missing(name: str) -> list[str]:
    """Why ``name`` cannot run here: the reasons of its missing needs (empty: it can)."""
    return [NEEDS[need][1] for need in TABLE.get(name, {}).get("needs", ()) if not NEEDS[need][0]()]


@dataclass
class SmokeRun:
    """One finished tiny run."""

    name: str
    seconds: float
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    def tail(self) -> str:
        return f"\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"


class SmokeRunner:
    """Runs ``python bench/<name>.py --smoke`` for each name, ``jobs`` at a time, the longest (the table's
    ``seconds``) first; :attr:`runs` maps each name to the future of its :class:`SmokeRun`."""

    def __init__(self, names: list[str], jobs: int) -> None:
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._pool = ThreadPoolExecutor(jobs, thread_name_prefix="bench-smoke")
        order = sorted(names, key=lambda n: -float(TABLE[n].get("seconds", 0)))
        self.runs: dict[str, Future[SmokeRun]] = {name: self._pool.submit(self._run, name) for name in order}

    def _run(self, name: str) -> SmokeRun:
        """On a ROS domain of its own; past its timeout SIGTERM (its clean-up stops its children), then SIGKILL of its
        process group; whatever of it is left when it ends is killed too, so it cannot disturb the next."""
        env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # each bench reserves a free domain
        timeout = float(TABLE[name].get("timeout", DEFAULT_TIMEOUT))
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise RuntimeError("the smoke runs were stopped")
            proc = subprocess.Popen([sys.executable, str(BENCH / f"{name}.py"), "--smoke"], cwd=ROOT, env=env, text=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
            self._procs.add(proc)
        timed_out = False
        try:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.send_signal(signal.SIGTERM)
                try:
                    stdout, stderr = proc.communicate(timeout=GRACE)
                except subprocess.TimeoutExpired:
                    _kill_group(proc)
                    stdout, stderr = proc.communicate()
        finally:
            _kill_group(proc)
            with self._lock:
                self._procs.discard(proc)
        return SmokeRun(name, time.monotonic() - started, proc.returncode, stdout, stderr, timed_out)

    def close(self) -> None:
        """Stop what has not started and kill what runs (an interrupted session)."""
        with self._lock:
            self._closed = True
            for proc in self._procs:
                _kill_group(proc)
        self._pool.shutdown(wait=True, cancel_futures=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[SmokeRun]]]:
    """The tiny runs of the benchmarks this session selected (with -k, only those), started together."""
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params]
    runner = SmokeRunner([n for n in dict.fromkeys(selected) if n in TABLE and not missing(n)], JOBS)
    try:
        yield runner.runs
    finally:
        runner.close()


def test_every_benchmark_has_a_row_and_every_row_a_benchmark() -> None:
    assert not set(BENCHES) - set(TABLE), (
        f"no row in test/fixtures/bench_smoke.yaml for {sorted(set(BENCHES) - set(TABLE))}: add the fields of its JSON line")
    assert not set(TABLE) - set(BENCHES), f"rows for benchmarks that are gone: {sorted(set(TABLE) - set(BENCHES))}"
    for name, row in TABLE.items():
        assert set(row) <= {"numbers", "flags", "needs", "timeout", "seconds"}, (name, sorted(row))
        assert row.get("numbers") and row.get("flags"), f"{name}: name its headline numbers and its goal flags"
        assert set(row.get("needs", ())) <= set(NEEDS), (name, row["needs"])


def test_smoke_values_replace_the_defaults_and_the_command_line_wins() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import _common as C
    finally:
        sys.path.remove(str(BENCH))
    parser = C.parser("test", runs=100, smoke={"runs": 2, "size": 5})
    parser.add_argument("--size", type=int, default=1000)
    assert vars(parser.parse_args([])) == {"runs": 100, "size": 1000, "smoke": False}
    assert vars(parser.parse_args(["--smoke"])) == {"runs": 2, "size": 5, "smoke": True}
    assert vars(parser.parse_args(["--smoke", "--runs", "7"])) == {"runs": 7, "size": 5, "smoke": True}
    with pytest.raises(TypeError, match="nosuch"):
        C.parser("test", runs=1, smoke={"nosuch": 1}).parse_args(["--smoke"])


@pytest.mark.timeout(WAIT)
@pytest.mark.parametrize("name", BENCHES)
def test_the_benchmark_runs_in_its_tiny_mode_and_prints_its_json_line(name: str, smoke_runs: dict[str, Future[SmokeRun]]) -> None:
    if name not in TABLE:
        pytest.fail(f"bench/{name}.py has no row in test/fixtures/bench_smoke.yaml")
    if missing(name):
        pytest.skip("; ".join(missing(name)))
    run = smoke_runs[name].result(timeout=WAIT)
    print(f"bench/{name}.py --smoke: {run.seconds:.1f} s, exit {run.returncode}")
    if run.timed_out:
        pytest.fail(f"bench/{name}.py --smoke ran past {TABLE[name].get('timeout', DEFAULT_TIMEOUT)} s{run.tail()}")
    assert run.returncode == 0, f"bench/{name}.py --smoke exited with {run.returncode}{run.tail()}"
    lines = run.stdout.strip().splitlines()
    assert lines, f"bench/{name}.py --smoke printed nothing{run.tail()}"
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        pytest.fail(f"the last line of bench/{name}.py --smoke is not JSON ({exc}): {lines[-1][:300]!r}{run.tail()}")
    assert isinstance(result, dict), f"the last line is JSON but not an object: {lines[-1][:300]!r}"
    assert result.get("benchmark") == name, result.get("benchmark")
    assert result.get("smoke") is True, "the JSON line of a tiny run says \"smoke\": true (bench/_common.py emit())"
    for path in TABLE[name]["numbers"]:
        value = field(result, path)
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value), (
            f"{name}: {path} is {value!r}, not a finite number")
    for path in TABLE[name]["flags"]:
        assert isinstance(field(result, path), bool), f"{name}: {path} is {field(result, path)!r}, not true or false"


def field(result: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or pytest.fail naming what is missing."""
    value: Any = result
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            pytest.fail(f"the JSON line has no {path!r} ({key!r} missing); its keys: {sorted(result)}")
        value = value[key]
    return value
