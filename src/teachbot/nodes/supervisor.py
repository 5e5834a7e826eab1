"""Each node of a node set in its own process, restarted when it dies: ``teachbot sim --processes``.

The CLI's twin of ``ros2 launch`` with ``respawn=True`` (teachbot.nodes.launching): a node killed with
``kill -9`` (or crashed) comes back after :data:`RESPAWN_DELAY` seconds, at most
:data:`MAX_RESTARTS_PER_MINUTE` times a minute (then it stays down and the supervisor says so), and
every death and restart is one line on the log. :meth:`Supervisor.stop` stops the nodes in stages
(:func:`stop_stages`): the arm is halted before the stores close. Plain Python around subprocess: no rclpy here.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from teachbot.nodes.nodeset import NodeSpec
from teachbot.nodes.run_one import spec_to_json

RESPAWN_DELAY = 0.5  # seconds between a node's death and its restart (also launch's respawn_delay)
MAX_RESTARTS_PER_MINUTE = 5  # more deaths than this within 60 s: the node stays down
POLL = 0.05  # seconds between checks of the children
STOP_GRACE = 5.0  # seconds a node has to exit after SIGTERM before it is killed
MOTION = ("interaction_manager", "skills")  # stopped first: what makes the robot move (stop_stages)
STORES = ("memory",)  # stopped last: the stores
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec only calls it


def _die_with_supervisor() -> None:
    """In the child before exec: SIGTERM when the supervisor's thread that started it ends (a supervisor
    killed with kill -9 must not leave its nodes running, orphaned, on the robot)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


@dataclass
class Child:
    """One supervised node: its spec, its current process and the times it was restarted."""

    spec: NodeSpec
    process: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)  # time.monotonic() of each restart
    due: float | None = None  # when a dead node is to be restarted
    given_up: bool = False


def stop_stages(names: Sequence[str]) -> list[list[str]]:
    """The order a stack stops in, as stages of node names (``names``' order within each): first the nodes that
    move the robot (:data:`MOTION`: the console that sends skill goals, the skills node that drives the arm), so the
    arm is halted and no new goal can come while anything else goes; then every other node (the simulator, the
    perception, the improvement node that writes lessons through the memory, ...); the stores (:data:`STORES`) last,
    so whatever the others hand them on their way out is still stored."""
    first = [n for n in names if n in MOTION]
    last = [n for n in names if n in STORES]
    middle = [n for n in names if n not in MOTION and n not in STORES]
    return [stage for stage in (first, middle, last) if stage]


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class Supervisor:
    """Start with :meth:`start`, read :attr:`children`, end with :meth:`stop`."""

    def __init__(self, specs: Sequence[NodeSpec], respawn_delay: float = RESPAWN_DELAY,
                 max_restarts_per_minute: int = MAX_RESTARTS_PER_MINUTE,
                 log: Callable[[str], None] | None = None, env: dict[str, str] | None = None) -> None:
        """``env``: the children's environment (default: this process's, which holds ROS_DOMAIN_ID)."""
        self.children = {s.name: Child(s) for s in specs if not (s.provided_by and not s.available())}
        self.skipped = [s for s in specs if s.name not in self.children]
        self.respawn_delay = respawn_delay
        self.max_restarts = max_restarts_per_minute
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.env = env
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start every node's process and the thread that restarts the ones that die."""
        for child in self.children.values():
            self._spawn(child)
        self._thread = threading.Thread(target=self._watch, daemon=True, name="teachbot-supervisor")
        self._thread.start()

    def pid(self, name: str) -> int:
        """The process id of node ``name`` now (changes at each restart)."""
        process = self.children[name].process
        if process is None:
            raise KeyError(f"node {name!r} is not running")
        return process.pid

    def _spawn(self, child: Child) -> None:
        env = {**(self.env if self.env is not None else os.environ), "TEACHBOT_LOOPBACK": "1"}
        child.process = subprocess.Popen([sys.executable, "-m", "teachbot.nodes.run_one", spec_to_json(child.spec)],
                                         env=env, start_new_session=True, preexec_fn=_die_with_supervisor)
        child.due = None

    def _watch(self) -> None:
        while not self._stop.wait(POLL):
            with self._lock:
                if self._stop.is_set():
                    return
                now = time.monotonic()
                for name, child in self.children.items():
                    self._check(name, child, now)

    def _check(self, name: str, child: Child, now: float) -> None:
        """Notice a death, and restart a dead node once its delay is over (under the cap)."""
        process = child.process
        if process is not None and process.poll() is not None:
            child.process = None
            child.restarts = [t for t in child.restarts if now - t < 60.0]
            if len(child.restarts) >= self.max_restarts:
                child.given_up = True
                self.log(f"teachbot: node {name} (pid {process.pid}) {_describe_exit(process.returncode)}; "
                         f"restarted {len(child.restarts)} times in the last minute already, so it stays down")
                return
            child.due = now + self.respawn_delay
            self.log(f"teachbot: node {name} (pid {process.pid}) {_describe_exit(process.returncode)}; "
                     f"restarting it in {self.respawn_delay:g} s ({len(child.restarts) + 1}/{self.max_restarts} this minute)")
        if child.process is None and child.due is not None and now >= child.due and not child.given_up:
            child.restarts.append(now)
            self._spawn(child)
            self.log(f"teachbot: node {name} restarted (pid {child.process.pid})")

    def stop(self) -> None:
        """Stop restarting, then stop the nodes in :func:`stop_stages` order: SIGTERM a stage's nodes, wait until they
        have exited (SIGKILL those still running after :data:`STOP_GRACE`), then the next stage."""
        self._stop.set()
        with self._lock:
            running = {name: c.process for name, c in self.children.items() if c.process is not None}
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for stage in stop_stages(list(running)):
            processes = [running[name] for name in stage]
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE
            for process in processes:
                try:
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()

    def __enter__(self) -> Supervisor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
