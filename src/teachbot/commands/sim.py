"""``teachbot sim``: the simulated robot, every node of the node set's sim mode in one process, until
Ctrl-C. ``serve`` runs any mode's node set the same way (``teachbot robot`` uses it too)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from teachbot.commands._args import add_scene_args, add_stack_args, node_set_values
from teachbot.nodes.nodeset import NodeSpec

if TYPE_CHECKING:
    from teachbot.nodes.stack import InProcessStack


# seconds after which a stop that hangs (a node whose close never returns) ends the process anyway; a busy stack
# stops in far less (the skill is halted first, see _halt_then_stop); docker stop waits 10 s before SIGKILL
STOP_BACKSTOP = 9.0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``sim`` parser."""
    sim = sub.add_parser(
        "sim", help="run the simulated robot (sim, skills, perception, memory; LLM nodes on request) until Ctrl-C",
        description="The simulated robot in one process: the same nodes as `ros2 launch teachbot sim.launch.py`.",
    )
    add_scene_args(sim)
    sim.add_argument("--gui", action="store_true", help="open the PyBullet window (needs a display)")
    sim.add_argument("--real-time-factor", type=float, default=None, metavar="X",
                     help="simulated seconds per wall second; 0 = as fast as possible (default: config/sim.yaml)")
    sim.add_argument("--no-camera", action="store_true", help="do not render or publish camera images")
    sim.add_argument("--processes", action="store_true",
                     help="run each node in its own process and restart one that dies (like ros2 launch's respawn)")
    add_stack_args(sim)
    sim.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the simulated robot until Ctrl-C or SIGTERM."""
    return serve("sim", args)


class Progress:
    """Start-up progress on stderr: one line rewritten in place on a terminal, nothing when piped."""

    def __init__(self, total: int, stream: object = None) -> None:
        self.stream = stream or sys.stderr
        self.total, self.done = total, 0
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())

    def step(self, what: str) -> None:
        """Announce the next step: ``[2/5] starting skills ...``."""
        self.done += 1
        if self.live:
            self.stream.write(f"\r\033[K[{self.done}/{self.total}] {what} ...")
            self.stream.flush()

    def clear(self) -> None:
        """Remove the progress line before the status line is printed."""
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


def serve(mode: str, args: argparse.Namespace) -> int:
    """Build ``mode``'s node set from the command line, print one status line when it is up, run until stopped."""
    from teachbot.nodes.nodeset import describe, node_set  # deferred: loaded when the command runs

    specs = node_set(mode, node_set_values(args, mode))
    if args.dry_run:
        print(describe(specs))
        return 0
    if getattr(args, "processes", False):
        return _supervise(mode, specs)
    import rclpy  # deferred: rclpy, loaded when the command runs
    from rclpy.signals import SignalHandlerOptions  # deferred: rclpy, loaded when the command runs

    # rclpy's own handlers would shut the context down under the running nodes; here Ctrl-C and
    # SIGTERM (a service manager, `timeout`) end the wait below and the nodes stop in order
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    try:
        code = _serve(mode, specs, stop)
    finally:
        if rclpy.ok():
            rclpy.shutdown()
    _exit_now(code)
    return code  # not reached


def _exit_now(code: int) -> None:
    """End the process once every node is closed, its spans and logs written: the interpreter's own teardown
    (DDS entities left to the garbage collector) took seconds more after a task was cut short."""
    from teachbot.tracing.setup import flush  # deferred: loaded when the command runs

    flush(2.0)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve(mode: str, specs: list[NodeSpec], stop: threading.Event) -> int:
    """Start the stack, print its status, wait for ``stop``, stop the stack."""
    from teachbot.nodes.common import DuplicateNodeError  # deferred: rclpy, loaded when the command runs
    from teachbot.nodes.stack import InProcessStack  # deferred: pybullet, rclpy, loaded when the command runs

    stack = InProcessStack.from_node_set(specs)
    progress = Progress(len(specs) + 1)
    started = time.monotonic()
    try:
        stack.start(on_node=lambda spec: progress.step(f"starting {spec.name}"))
    except DuplicateNodeError as exc:
        progress.clear()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        progress.clear()
    domain = os.environ["ROS_DOMAIN_ID"]
    names = [n.get_name() for n in stack.nodes]
    print(f"teachbot {mode} ready in {time.monotonic() - started:.1f} s: {', '.join(names)} "
          f"on ROS_DOMAIN_ID={domain} (loopback only)", flush=True)
    for spec in stack.skipped:
        print(f"  not started: {spec.name} ({spec.module} is not installed)", flush=True)
    if "interaction_manager" in names:
        print(f"  talk to it: teachbot chat --domain-id {domain}", flush=True)
    if "web" in names:
        web = stack.node("web")
        print(f"  web page: {web.url}" + ("?token=<the token>" if web.settings.token else ""), flush=True)
    from teachbot.robot_profile import RobotProfile  # deferred: loaded when the command runs

    household = any(spec.name == "skills" and RobotProfile.load(str(spec.parameters["robot_profile"])).world == "household"
                    for spec in specs)
    skills = ("move_to|grasp|place_object|handover_object_to_human|point_at|open|close|toggle|slice|wipe" if household
              else "pick|place|put_first_on_second|handover|move_to|gripper|go_home|wait")
    print(f"  skills: /skills/<{skills}>; Ctrl-C to stop", flush=True)
    return _run_until(stop, lambda: _halt_then_stop(stack))


def _halt_then_stop(stack: InProcessStack) -> None:
    """Halt the robot first, while the nodes still spin: the running skill is cancelled, the arm held and every later
    command refused; the skills node then leaves the graph, so a robot call still waiting for its result returns at
    once and the console's task ends. Then every other node closes (the stores among them)."""
    skills = next((node for node in stack.nodes if node.get_name() == "skills"), None)
    if skills is not None:
        skills.halt("the robot stack is stopping")
        stack.remove_node(skills)
    stack.stop()


def _supervise(mode: str, specs: list[NodeSpec]) -> int:
    """Each node in its own process (teachbot.nodes.supervisor), restarted when it dies, until Ctrl-C or SIGTERM."""
    from teachbot.nodes.supervisor import Supervisor  # deferred: loaded when the command runs
    from teachbot.ros_env import configure_loopback  # deferred: loaded when the command runs

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    configure_loopback()  # the children inherit ROS_DOMAIN_ID and the loopback DDS profile
    supervisor = Supervisor(specs)
    supervisor.start()
    domain = os.environ["ROS_DOMAIN_ID"]
    names = ", ".join(f"{name} (pid {supervisor.pid(name)})" for name in supervisor.children)
    print(f"teachbot {mode}: {names} on ROS_DOMAIN_ID={domain} (loopback only); a node that dies is restarted; "
          "Ctrl-C to stop", flush=True)
    for spec in supervisor.skipped:
        print(f"  not started: {spec.name} ({spec.module} is not installed)", flush=True)
    return _run_until(stop, supervisor.stop)


def _run_until(stop: threading.Event, close: Callable[[], None]) -> int:
    """Wait for Ctrl-C or ``stop`` (SIGTERM), then ``close`` the nodes, saying so; a close that hangs for
    :data:`STOP_BACKSTOP` s ends the process anyway."""
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        print("stopping ...", flush=True)
        backstop = threading.Timer(STOP_BACKSTOP, _give_up)
        backstop.daemon = True
        backstop.start()
        close()
        backstop.cancel()
        print("stopped", flush=True)
    return 0


def _give_up() -> None:
    """The backstop: say so and end the process now, whatever is still closing."""
    print(f"teachbot: the nodes did not stop within {STOP_BACKSTOP:g} s; exiting without waiting for them",
          file=sys.stderr, flush=True)
    os._exit(1)
