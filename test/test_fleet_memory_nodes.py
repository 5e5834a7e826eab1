"""Three memory nodes in three processes on one PostgreSQL database (issue 16, item 5).

Each robot is a child process running the real ``MemoryNode`` on the postgres backend (config/memory.yaml's
memory.store.backend: postgres) on a ROS domain of its own, with a probe that calls its services: a writer adds
lessons through ``memory/add`` and a watcher polls ``memory/retrieve`` (and listens on ``memory/updated``, which
announces the other robots' lessons too). The three learn concurrently; midway the server is stopped, the robots
keep learning (their lessons queue in their spools), the server comes back while they still learn, and then they
learn once more. Checked: no lesson lost or stored twice (the database holds each instruction once, with its key
row); every lesson learned while the server is up reaches the other two nodes' retrieval within 1 s; the outage
is a warning line and a retry in each node's log, never a failed ``memory/add``; the queued lessons reach every
node once the server is back; at the end each node retrieves every lesson by its own instruction with score 1,
and each node's ``memory/updated`` told of every lesson once.

Run as a script, this file is one robot (the child); the test is the parent.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pg_server import PgServer, pg_server  # noqa: F401 - the fixture
from timing import deadline, timeout

# A lesson learned on one robot is in the others' retrieval within this. The goal is 1 s (issue 16) and
# bench/fleet_memory.py measures it ("reach"); here the bound only has to tell a notified delivery from none
# (without a notification a lesson arrives only with the catch-up after a reconnect, which phase 1 never has),
# so it is far above what a loaded machine takes (1.18 s at load 15, 5.2 s at load 19 on 2 cores).
GOAL_S = timeout(30.0)
BACK_S = 30.0  # after the server is back: listener backoff (<= 2 s), reconnect, flush and catch-up (scaled; any load)
NOTICE_S = 30.0  # a waited-for event that must come, however slow the machine (scaled): how fast is the bench's
ROBOTS = ("arm-a", "arm-b", "arm-c")
POLL_S = 0.1  # the watcher's retrieval period (each poll costs CPU: 2 cores are shared)
ROOT = Path(__file__).resolve().parents[1]


def instruction(robot: str, number: int) -> str:
    return f"lesson {number} of robot {robot}"


# ---------------------------------------------------------------------------------------------- the child
def child(dsn: str, robot: str, workdir: str) -> int:
    """One robot: its memory node and a probe, driven by lines on stdin, reporting JSON lines on stdout."""
    import rclpy
    import ros_graph
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from teachbot_interfaces.msg import InteractionExample as ExampleMsg
    from teachbot_interfaces.msg import MemoryUpdate
    from teachbot_interfaces.srv import AddExample, RetrieveExamples
    from test_pg_store import HashEmbedder, transcript

    from teachbot.memory.config import MemoryConfig
    from teachbot.nodes.memory_node import MemoryNode
    from teachbot.ros_env import configure_loopback
    from teachbot.stores.backend import open_memory

    configure_loopback()  # a ROS domain of this robot's own
    out_lock = threading.Lock()

    def say(**event: Any) -> None:
        with out_lock:
            print(json.dumps(event), flush=True)

    config_file = Path(workdir) / "memory.yaml"
    config_file.write_text(yaml.safe_dump({"memory": {"store": {
        "backend": "postgres", "dsn": dsn, "robot_id": robot, "scope": "fleet", "seeds_dir": "",
        "learned_dir": f"{workdir}/learned", "spool_dir": f"{workdir}/spool", "knowledge_dir": f"{workdir}/kb",
        "tasks_dir": f"{workdir}/tasks"}}}))
    rclpy.init()
    node = MemoryNode(open_memory(MemoryConfig.load(config_file), HashEmbedder()), config=str(config_file))
    graph = ros_graph.Graph(node, name=f"fleet_{robot.replace('-', '_')}")
    add, retrieve = graph.client(AddExample, "memory/add"), graph.client(RetrieveExamples, "memory/retrieve")
    updates = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
    graph.probe.create_subscription(MemoryUpdate, "memory/updated",
                                    lambda m: say(updated=m.example_id, action=int(m.action), t=time.monotonic()), updates)
    stop = threading.Event()

    def watch() -> None:
        seen: set[str] = set()
        while not stop.is_set():
            found = ros_graph.call(retrieve, RetrieveExamples.Request(instructions=["anything"], k=1000), 30.0)
            now = time.monotonic()
            for example in found.examples:
                if example.id not in seen:
                    seen.add(example.id)
                    say(seen=example.id, t=now)
            stop.wait(POLL_S)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    say(ready=robot)
    try:
        for line in sys.stdin:
            command, _, rest = line.strip().partition(" ")
            args = rest.split()
            if command == "learn":  # learn <first number> <count>: add lessons one after the other, as fast as served
                first, count = int(args[0]), int(args[1])
                for number in range(first, first + count):
                    text = instruction(robot, number)
                    msg = ExampleMsg(profile="tabletop", source="learned", transcript=transcript(text), episode_id=robot)
                    answer = ros_graph.call(add, AddExample.Request(example=msg), 30.0)
                    say(added=answer.id, text=text, ok=answer.success, message=answer.message, t=time.monotonic())
                say(learned=count)
            elif command == "check":  # every lesson in the database, retrieved by its own instruction
                results = {}
                for text in json.loads(rest):
                    found = ros_graph.call(retrieve, RetrieveExamples.Request(instructions=[text], k=1), 30.0)
                    results[text] = [(e.id, e.transcript, float(s)) for e, s in zip(found.examples, found.scores)]
                say(checked=results)
            elif command == "quit":
                break
    finally:
        stop.set()
        watcher.join(timeout=timeout(35.0))
        graph.close()
        node.close()
        node.destroy_node()
        rclpy.shutdown()
    return 0


# ---------------------------------------------------------------------------------------------- the parent
class Robot:
    """A child robot process; its stdout events and stderr lines collected by two threads."""

    def __init__(self, dsn: str, name: str, workdir: Path) -> None:
        self.name = name
        workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "test"), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen([sys.executable, __file__, dsn, name, str(workdir)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.log: list[str] = []
        self.added: list[dict[str, Any]] = []  # the add answers, in order
        self.seen: dict[str, float] = {}  # example id -> first time in this node's retrieval
        self.updated: dict[str, int] = {}  # example id -> memory/updated ADDED messages about it
        self.checked: dict[str, Any] | None = None
        self._lock = threading.Lock()
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            with self._lock:
                if "seen" in event:
                    self.seen.setdefault(event["seen"], event["t"])
                elif "updated" in event:
                    if event["action"] == 0:
                        self.updated[event["updated"]] = self.updated.get(event["updated"], 0) + 1
                elif "added" in event:
                    self.added.append(event)
                elif "checked" in event:
                    self.checked = event["checked"]
            self.events.put(event)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.log.append(line.rstrip("\n"))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_for(self, key: str, timeout: float) -> dict[str, Any]:
        """The next event carrying ``key`` (earlier events of other kinds are consumed)."""
        end = deadline(timeout)
        while True:
            left = end - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self.events.empty():
                pytest.fail(f"{self.name}: no {key!r} within {timeout} s\n" + "\n".join(self.log[-40:]))
            try:
                event = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if key in event:
                return event

    def log_text(self) -> str:
        with self._lock:
            return "\n".join(self.log)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=timeout(40))
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def learn_all(robots: list[Robot], first: int, count: int) -> None:
    """Every robot learns ``count`` lessons at once; returns when all have answered."""
    for robot in robots:
        robot.send(f"learn {first} {count}")
    for robot in robots:
        robot.wait_for("learned", 120.0)


def wait_until(condition: Any, seconds: float, what: str) -> None:
    until = deadline(seconds)
    while not condition():
        assert time.monotonic() < until, f"timed out after {seconds} s (scaled) waiting for {what}"
        time.sleep(0.02)


def reach_times(robots: list[Robot], ids: set[str]) -> dict[tuple[str, str], float]:
    """(lesson id, robot) -> seconds from the add's answer on its robot to its first retrieval on another robot."""
    added = {e["added"]: (robot.name, e["t"]) for robot in robots for e in robot.added if e["added"] in ids}
    return {(lesson, robot.name): robot.seen[lesson] - t for lesson, (owner, t) in added.items() for robot in robots
            if robot.name != owner and lesson in robot.seen}


@pytest.mark.parametrize("pg_server", ["debian", "pgvector"], indirect=True)
def test_three_memory_nodes_share_lessons_through_a_server_restart(pg_server: PgServer, tmp_path: Path) -> None:  # noqa: F811
    dsn = pg_server.fresh_dsn()
    database = dsn.split("dbname=")[1].split()[0]
    robots = [Robot(dsn, name, tmp_path / name) for name in ROBOTS]
    try:
        for robot in robots:
            robot.wait_for("ready", 120.0)
        # 1. all three learn at once with the server up: each lesson at the other two within GOAL_S
        learn_all(robots, 0, 10)
        up_ids = {e["added"] for r in robots for e in r.added}
        wait_until(lambda: all(up_ids <= set(r.seen) for r in robots), NOTICE_S, "the first lessons on every node")

        # 2. the server stops: error lines, and learning goes on (queued in each robot's spool)
        pg_server.stop()
        for robot in robots:
            wait_until(lambda r=robot: "unreachable" in r.log_text(), NOTICE_S, f"{robot.name}'s warning line")
        learn_all(robots, 10, 5)
        queued = [e for r in robots for e in r.added[10:]]
        assert all(e["ok"] for e in queued), [e["message"] for e in queued if not e["ok"]]
        for robot in robots:
            assert len(list((tmp_path / robot.name / "spool").glob("*.json"))) == 5, robot.name

        # 3. the server comes back while the robots learn: the queues are written, everyone catches up
        pg_server.start()
        back = time.monotonic()
        learn_all(robots, 15, 5)
        everything = {e["added"] for r in robots for e in r.added}
        wait_until(lambda: all(everything <= set(r.seen) for r in robots), BACK_S, "every queued lesson on every node")
        caught_up = time.monotonic() - back
        for robot in robots:  # the node's own log lines (ROS logger): the outage, the retry, the return
            lines = [line for line in robot.log if "[memory]: memory store:" in line]
            warnings = [line for line in lines if line.startswith("[WARN]") and "unreachable" in line]
            assert any("retrying" in line for line in warnings), "\n".join(lines)
            assert len(warnings) <= 6, "one line per outage and concern, not one per call:\n" + "\n".join(warnings)
            assert any("is back" in line for line in lines) and any("queued lessons into" in line for line in lines)
            assert not list((tmp_path / robot.name / "spool").glob("*.json")), f"{robot.name}'s spool was not written"

        # 4. and once more with the server up
        learn_all(robots, 20, 5)
        late_ids = {e["added"] for r in robots for e in r.added[20:]}
        wait_until(lambda: all(late_ids <= set(r.seen) for r in robots), NOTICE_S, "the last lessons on every node")

        added = [e for r in robots for e in r.added]
        assert all(e["ok"] for e in added) and len(added) == 75
        texts = sorted(e["text"] for e in added)
        assert texts == sorted(instruction(r, n) for r in ROBOTS for n in range(25))
        rows = pg_server.psql("SELECT count(*), count(DISTINCT id), count(DISTINCT instructions) FROM teachbot_examples "
                              "WHERE NOT removed", database)
        assert rows == "75|75|75", "a lesson was lost or stored twice"
        assert pg_server.psql("SELECT count(*) FROM teachbot_example_keys", database) == "75"
        for robot in robots:
            robot.send("check " + json.dumps(texts))
        by_text = {e["text"]: e["added"] for e in added}
        for robot in robots:
            robot.wait_for("checked", 120.0)
            assert robot.checked is not None
            for text, found in robot.checked.items():
                assert len(found) == 1 and found[0][0] == by_text[text], (robot.name, text, found)
                assert text in found[0][1] and found[0][2] == pytest.approx(1.0, abs=1e-4)

        for robot in robots:  # memory/updated told of every lesson once: its own, and the others' as they arrived
            assert robot.updated == {e["added"]: 1 for e in added}, robot.name
        times = reach_times(robots, up_ids | late_ids)
        assert len(times) == 2 * len(up_ids | late_ids)
        slow = {key: round(t, 3) for key, t in times.items() if t > GOAL_S}
        ordered = sorted(times.values())
        print(f"\n{pg_server.bin_dir}: {len(times)} deliveries, median {ordered[len(ordered) // 2] * 1000:.0f} ms, "
              f"max {ordered[-1] * 1000:.0f} ms; queued lessons everywhere {caught_up:.2f} s after the restart")
        assert not slow, f"lessons that took over {GOAL_S} s to reach another node: {slow}"
    finally:
        for robot in robots:
            robot.close()


if __name__ == "__main__":
    raise SystemExit(child(*sys.argv[1:4]))
