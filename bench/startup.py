#!/usr/bin/env python3
"""Start-up time: from process start to every node ready.

Each repetition (fresh processes, a fresh ROS domain) measures from just before spawning until a
SkillClient in this process returns from wait_ready(): every action server and sim service
discovered (and answering, where wait_ready probes them). Default node parameters
(config/sim.yaml: real_time_factor 1, camera on). Two forms:

  separate_processes  the sim and skills nodes as two child processes (as ``ros2 launch`` runs them)
  composed_cli        ``teachbot sim``: both nodes composed in one child process (skipped when the
                      CLI has no ``sim`` command)

The client's own rclpy start-up (init, node, executor) is inside the timed window, as for a
third process started together with the nodes. Also reported: when each node logged that it was
ready (from its log line's timestamp), relative to the spawn.

Goal: median under 8 s.   Usage: python bench/startup.py [--runs 5] [--only separate_processes|composed_cli] [--smoke]
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import _common as C

C.setup()

GOAL_S = 8.0
READY_TIMEOUT = 120.0  # a guard against a hang, not a goal: a loaded machine may take long to start nodes
READY_LINE = re.compile(r"\[(?:INFO|WARN)\] \[(\d+\.\d+)\] \[(sim|skills)\]: (?:sim|skills) ready")


def cli_command() -> list[str] | None:
    """How to run ``teachbot sim``, or None when there is no such command."""
    if importlib.util.find_spec("teachbot.cli") is None:
        return None
    script = Path(sys.executable).parent / "teachbot"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "teachbot.cli"]
    probe = subprocess.run([*cmd, "sim", "--help"], capture_output=True, text=True, timeout=60, cwd=str(C.REPO))
    return [*cmd, "sim"] if probe.returncode == 0 else None


def node_ready_times(procs: list[subprocess.Popen], epoch0: float) -> dict[str, float]:
    """Seconds from spawn to each node's 'ready' log line."""
    found: dict[str, float] = {}
    for proc in procs:
        try:
            text = Path(proc.log).read_text(errors="replace")  # type: ignore[attr-defined]
        except OSError:
            continue
        for match in READY_LINE.finditer(text):
            found.setdefault(match.group(2), round(float(match.group(1)) - epoch0, 3))
    return found


def wait_discovered(client, t0: float) -> float:
    """Seconds from t0 until every action server and sim service is discovered (the first half of
    SkillClient.wait_ready; wait_ready may go on to probe them with real calls)."""
    pending = list(getattr(client, "_clients", {}).values()) + [getattr(client, n) for n in ("_world", "_reset") if hasattr(client, n)]
    deadline = time.perf_counter() + READY_TIMEOUT
    while pending and time.perf_counter() < deadline:
        pending = [c for c in pending if not (c.server_is_ready() if hasattr(c, "server_is_ready") else c.service_is_ready())]
        if pending:
            time.sleep(0.005)
    return time.perf_counter() - t0


def one_start(spawn_commands: list[tuple[list[str], str]], rep: int, label: str) -> dict:
    procs: list[subprocess.Popen] = []
    session = None
    try:
        epoch0 = time.time()
        t0 = time.perf_counter()
        for cmd, name in spawn_commands:
            procs.append(C.spawn(cmd, name))
        session = C.ClientSession("bench_startup")
        t_client = time.perf_counter() - t0
        t_discovered = wait_discovered(session.client, t0)
        try:
            session.client.wait_ready(READY_TIMEOUT, sim=True)
        except Exception:
            C.check_alive(*procs)
            raise
        elapsed = time.perf_counter() - t0
        C.check_alive(*procs)
        nodes = node_ready_times(procs, epoch0)
        C.say(f"  [{label}] run {rep}: ready after {elapsed:.2f} s (client up {t_client:.2f} s; node ready lines: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(nodes.items()))
              + f"; all discovered {t_discovered:.2f} s; wait_ready done {elapsed:.2f} s)")
        return {"ready_s": elapsed, "client_up_s": t_client, "discovered_s": t_discovered, "nodes": nodes}
    finally:
        if session is not None:
            session.close()
        for proc in procs:
            C.stop(proc)


def measure(label: str, spawn_commands: list[tuple[list[str], str]], runs: int) -> dict:
    C.say(f"{label}: " + " & ".join(" ".join(Path(c[0]).name if i == 0 else c for i, c in enumerate(cmd)) for cmd, _ in spawn_commands))
    rows = []
    for rep in range(runs):
        C.fresh_domain()  # nothing of the previous repetition can be discovered
        rows.append(one_start(spawn_commands, rep, label))
    out = {**C.summary([r["ready_s"] for r in rows], 3), "unit": "s"}
    for node in ("sim", "skills"):
        values = [r["nodes"][node] for r in rows if node in r["nodes"]]
        if values:
            out[f"{node}_ready_line_s_median"] = round(C.statistics.median(values), 3)
    out["client_up_s_median"] = round(C.statistics.median(r["client_up_s"] for r in rows), 3)
    out["discovered_s_median"] = round(C.statistics.median(r["discovered_s"] for r in rows), 3)
    return out


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=5, smoke={"runs": 1})
    p.add_argument("--only", choices=("separate_processes", "composed_cli"))
    args = p.parse_args()
    machine = C.machine()
    import rclpy  # noqa: F401 - imported before any timing: the first run must not pay for it

    import teachbot.nodes.skill_client  # noqa: F401
    configs: dict[str, dict] = {}
    try:
        if args.only in (None, "separate_processes"):
            commands = [(C.node_command(*C.SIM_MODULE), "sim"), (C.node_command(*C.SKILLS_MODULE), "skills")]
            try:
                configs["separate_processes"] = measure("separate_processes", commands, args.runs)
            except Exception as exc:  # noqa: BLE001
                C.say(f"  ERROR: {type(exc).__name__}: {exc}")
                configs["separate_processes"] = {"error": f"{type(exc).__name__}: {exc}", "median": None}
        if args.only in (None, "composed_cli"):
            cli = cli_command()
            if cli is None:
                C.say("composed_cli: skipped (no `teachbot sim` command)")
                configs["composed_cli"] = {"skipped": "no `teachbot sim` command", "median": None}
            else:
                try:
                    configs["composed_cli"] = measure("composed_cli", [(cli, "teachbot-sim")], args.runs)
                except Exception as exc:  # noqa: BLE001
                    C.say(f"  ERROR: {type(exc).__name__}: {exc}")
                    configs["composed_cli"] = {"error": f"{type(exc).__name__}: {exc}", "median": None}
    finally:
        C.stop_all()
        C.remove_logs()

    # ros2 launch (separate processes) where it is installed, else `teachbot sim` (composed)
    composed_ok = configs.get("composed_cli", {}).get("median") is not None
    headline = "composed_cli" if composed_ok and not C.ros_launch_available() else "separate_processes"
    if headline not in configs:
        headline = next(iter(configs))
    value = configs[headline].get("median")
    C.say("")
    for name, r in configs.items():
        if r.get("median") is not None:
            C.say(f"{name:>20}: median {r['median']:.2f} s  min {r['min']:.2f}  max {r['max']:.2f}  "
                  f"(goal < {GOAL_S} s: {'met' if r['median'] < GOAL_S else 'MISSED'})")
        else:
            C.say(f"{name:>20}: {r.get('skipped') or r.get('error')}")
    C.say(f"headline: {headline} ({'ros2 launch available' if C.ros_launch_available() else 'ros2 launch not installed'})")
    C.emit({
        "benchmark": "startup", "unit": "s", "runs": args.runs, "headline": headline,
        "median": value, **C.goal_fields(value, GOAL_S),
        "separate_processes_median": configs.get("separate_processes", {}).get("median"),
        "composed_cli_median": configs.get("composed_cli", {}).get("median"),
        "configs": configs, "machine": machine,
    })
    return 0 if value is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
