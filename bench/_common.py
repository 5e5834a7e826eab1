"""Shared helpers for the benchmarks in bench/: repository path set-up, the loopback ROS environment,
child processes (the way ``ros2 launch`` runs nodes), timing summaries and the final JSON line.

Every benchmark prints human-readable lines and then, as its last line, one JSON object.
Import this module before anything from teachbot or rclpy:

    import _common as C
    C.setup()          # teachbot importable, loopback DDS configured (before rclpy is imported)

Every benchmark takes ``--smoke``: its tiny mode (a few repetitions, small sizes, given as values of its own
flags to :func:`parser`), which runs in seconds and only shows that the benchmark still works end to end;
test/test_bench_smoke.py runs each one so. Its JSON line then says ``"smoke": true``: its figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"

_children: list[subprocess.Popen] = []
_logs: list[Path] = []
_smoke = False  # set by BenchParser.parse_args when --smoke is given; emit() marks the JSON line


# ------------------------------------------------------------------ environment
def ensure_importable() -> None:
    """Make ``import teachbot`` work from any cwd without an install: put the repo's src/ first."""
    if importlib.util.find_spec("teachbot") is None or _foreign_teachbot():
        sys.path.insert(0, str(SRC))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(SRC) not in parts:  # child processes (python -m teachbot...) need it too
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SRC), *parts])


def _foreign_teachbot() -> bool:
    spec = importlib.util.find_spec("teachbot")
    return spec is not None and spec.origin is not None and not Path(spec.origin).resolve().is_relative_to(REPO)


def setup() -> dict[str, str]:
    """Repository importable, loopback-only DDS (before rclpy is imported), clean exit on SIGTERM."""
    ensure_importable()
    from teachbot.ros_env import configure_loopback

    env = configure_loopback()
    signal.signal(signal.SIGTERM, _raise_exit)  # so `finally` blocks stop stacks and children
    return env


def _raise_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


SMOKE_HELP = "tiny mode: a few repetitions at small sizes, seconds in all; checks the benchmark runs, its figures mean nothing"


class BenchParser(argparse.ArgumentParser):
    """An ArgumentParser with ``--smoke``: ``smoke`` maps the benchmark's own options (their dest names) to their
    tiny values, which replace the defaults when --smoke is given; options given on the command line still win."""

    def __init__(self, *args: Any, smoke: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.smoke_values = dict(smoke)
        self.add_argument("--smoke", action="store_true", help=SMOKE_HELP)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        global _smoke
        parsed = super().parse_args(args, namespace)
        if parsed.smoke:
            unknown = sorted(set(self.smoke_values) - set(vars(parsed)))
            if unknown:
                raise TypeError(f"tiny values for options this benchmark does not have: {', '.join(unknown)}")
            self.set_defaults(**self.smoke_values)
            parsed = super().parse_args(args, namespace)
            _smoke = True
        return parsed


def parser(description: str, runs: int | None, smoke: Mapping[str, Any]) -> BenchParser:
    """The benchmark's argument parser: ``--runs`` (unless ``runs`` is None) and ``--smoke`` with the tiny values
    ``smoke`` of its options (dest names, e.g. ``{"runs": 3, "sizes": [100]}``)."""
    p = BenchParser(description=description, smoke=smoke)
    if runs is not None:
        p.add_argument("--runs", type=int, default=runs, help=f"repetitions (default {runs})")
    return p


def smoke() -> bool:
    """True when this run is the benchmark's tiny mode (--smoke)."""
    return _smoke


# ------------------------------------------------------------------ child processes
def node_command(executable: str, module: str, params: dict[str, Any] | None = None) -> list[str]:
    """Command line of a node: the installed console script if there is one, else ``python -m``."""
    bindir = Path(sys.executable).parent
    candidates = [bindir / executable, bindir.parent / "lib" / "teachbot" / executable]
    script = next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)
    cmd = [str(script)] if script else [sys.executable, "-m", module]
    if params:
        cmd += ["--ros-args"]
        for key, value in params.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            cmd += ["-p", f"{key}:={value}"]
    return cmd


SIM_MODULE = ("sim", "teachbot.nodes.sim_node")
SKILLS_MODULE = ("skills", "teachbot.nodes.skills_node")
# The arm the skills node needs: every skill, the no-op wait too, reads the joint states before it runs. The
# sim node as a robot's driver runs, beside the stack in a process of its own: in real time, the arm at rest,
# joint states at 100 Hz, no camera.
ARM_PARAMS = {"real_time_factor": 1.0, "camera_enabled": False}


def spawn(cmd: Sequence[str], name: str) -> subprocess.Popen:
    """Start a child with this process's environment (loopback DDS, domain id); output to a log file."""
    log = Path(tempfile.mkstemp(prefix=f"teachbot-bench-{name}-", suffix=".log")[1])
    _logs.append(log)
    with open(log, "wb") as out:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env=os.environ.copy(), cwd=str(REPO))
    proc.log = log  # type: ignore[attr-defined]
    _children.append(proc)
    return proc


def spawn_node(which: tuple[str, str], params: dict[str, Any] | None = None) -> subprocess.Popen:
    return spawn(node_command(which[0], which[1], params), which[0])


def spawn_arm() -> subprocess.Popen:
    """The sim node with :data:`ARM_PARAMS` in a child process: joint states for a skills node that has no arm
    (:func:`wait_for_arm` waits until they reach it)."""
    return spawn_node(SIM_MODULE, ARM_PARAMS)


def wait_for_arm(client: Any, timeout: float) -> None:
    """Until the no-op skill succeeds through ``client`` (a SkillClient): the sim answers and the skills node has
    the arm's joint states. Before them a skill fails (no joint states), or meets the skills busy with a probe."""
    deadline = time.monotonic() + timeout
    client.wait_ready(timeout, sim=True)
    while True:
        result = client.call("wait", timeout=max(1.0, deadline - time.monotonic()), duration=0.0)
        if result.success:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the skills node has no arm after {timeout:.0f} s: {result.message}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen, grace: float = 5.0) -> int | None:
    """SIGINT (rclpy's clean shutdown), then SIGTERM, then SIGKILL; only this child, by its pid."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        if proc.poll() is not None:
            break
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    if proc in _children:
        _children.remove(proc)
    return proc.poll()


def stop_all() -> None:
    for proc in list(_children):
        stop(proc)


def check_alive(*procs: subprocess.Popen) -> None:
    """Raise with the tail of its log when a child has exited."""
    for proc in procs:
        if proc.poll() is not None:
            raise RuntimeError(f"child {proc.args!r} exited with {proc.returncode}:\n{log_tail(proc)}")


def log_tail(proc: subprocess.Popen, lines: int = 15) -> str:
    try:
        return "\n".join(Path(proc.log).read_text(errors="replace").splitlines()[-lines:])  # type: ignore[attr-defined]
    except OSError:
        return "(no log)"


def remove_logs() -> None:
    for log in _logs:
        with contextlib.suppress(OSError):
            log.unlink()
    _logs.clear()


# ------------------------------------------------------------------ ROS client in this process
class ClientSession:
    """rclpy context + a node wrapped in SkillClient, spun on its own background executor."""

    def __init__(self, name: str = "bench_client", executor: str = "single") -> None:
        import rclpy

        from teachbot.nodes.skill_client import SkillClient

        self._rclpy = rclpy
        self._owns = not rclpy.ok()
        if self._owns:
            rclpy.init()
        self.node = rclpy.create_node(name)
        self.client = SkillClient(self.node)
        self.client.spin_in_background()

    def close(self) -> None:
        self.client.close()
        self.node.destroy_node()
        if self._owns and self._rclpy.ok():
            self._rclpy.shutdown()


def stop_stack(stack: Any) -> None:
    """Stop an InProcessStack (it destroys its action servers and clients itself)."""
    stack.stop()


def fresh_domain() -> str:
    """Move this process (and children spawned from now on) to another free ROS_DOMAIN_ID, keeping
    the old one reserved too, so nothing left from an earlier configuration can be discovered."""
    from teachbot import ros_env

    held = getattr(ros_env, "_held_lock", None)  # older ros_env kept only the latest lock: keep it open
    if held is not None:
        _held_domains.append(held)
    os.environ["ROS_DOMAIN_ID"] = str(ros_env.reserve_domain_id())
    return os.environ["ROS_DOMAIN_ID"]


_held_domains: list[Any] = []


# ------------------------------------------------------------------ timing and output
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def summary(values: Iterable[float], digits: int = 4) -> dict[str, Any]:
    vals = [float(v) for v in values]
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "mean": None}
    return {
        "n": len(vals),
        "median": round(statistics.median(vals), digits),
        "min": round(min(vals), digits),
        "max": round(max(vals), digits),
        "mean": round(statistics.fmean(vals), digits),
        **({"p90": round(percentile(vals, 90), digits)} if len(vals) >= 10 else {}),
    }


def percentile(vals: Sequence[float], q: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def goal_fields(value: float | None, goal: float, lower_is_better: bool = True) -> dict[str, Any]:
    """``goal``, ``meets_goal`` and ``ratio`` (value/goal) for a headline figure."""
    if value is None:
        return {"goal": goal, "meets_goal": False, "ratio": None}
    meets = value < goal if lower_is_better else value > goal
    return {"goal": goal, "meets_goal": bool(meets), "ratio": round(value / goal, 4)}


def emit(result: dict[str, Any]) -> None:
    """The final line: one JSON object (``"smoke": true`` first in it in the tiny mode)."""
    import gc

    if _smoke:
        result = {"smoke": True, **result}

    gc.collect()  # rclpy futures print their unretrieved exceptions when collected: do it before the JSON
    sys.stdout.flush()
    sys.stderr.flush()
    print(json.dumps(result, sort_keys=False), flush=True)


def say(*args: Any) -> None:
    print(*args, flush=True)


def ros_launch_available() -> bool:
    """True when `ros2 launch` could run launch/sim.launch.py (the nodes as separate processes)."""
    return importlib.util.find_spec("ros2launch") is not None and importlib.util.find_spec("launch_ros") is not None


def machine() -> dict[str, Any]:
    import platform

    load = os.getloadavg() if hasattr(os, "getloadavg") else (None,)
    return {"cpus": os.cpu_count(), "loadavg_1min": round(load[0], 2) if load[0] is not None else None,
            "python": platform.python_version(),
            "rmw": os.environ.get("RMW_IMPLEMENTATION", ""), "ros_domain_id": os.environ.get("ROS_DOMAIN_ID", "")}
