"""ROS 2 node ``replay``: plays the person of a recorded session and checks what the robot does again.

The replay node set (teachbot.nodes.nodeset, launch/replay.launch.py) runs the simulated stack with the
interaction manager and improvement node answering from the recording's completions (llm_backend
scripted, llm_model the recording). This node, given the same recording:

- restores the recorded scene (sim/reset) before the person's first utterance;
- answers each wait_for_trigger()/ask() on interaction/transcript with the next recorded utterance on
  dialog/user, and leaves when none is left (ScriptedPerson, shared with ``teachbot replay``);
- compares the replayed transcript, the robot's words, the LLM calls and, when sim/get_world_state
  answers, the final world state with the recording (teachbot.recording.compare), stopping early at the
  first transcript line, robot utterance or completion that differs;
- logs the verdict and publishes it on replay/result (std_msgs/String, latched: ``OK: ...`` or
  ``DIVERGED: ...``); run as a process it then exits with status 0 on a match, 1 on a divergence.

With ``check`` false it only plays (``PLAYED: ...``). A person leaving cannot close the console's dialog
over ROS (dialog/user carries utterances only), so when the replayed person left where the recorded one
did, the recording's final ``SessionEnded`` line is not expected of the replay.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from std_msgs.msg import String
from teachbot_interfaces.msg import DialogTurn, LlmCompletion
from teachbot_interfaces.srv import GetWorldState, ResetScene

from teachbot.errors import ConfigError, TeachbotError
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, refuse_duplicate
from teachbot.nodes.console_stack import ScriptedPerson
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS, _call
from teachbot.nodes.replay_check import ReplayReport
from teachbot.recording.bag import SESSION_END, RecordedCompletion, RecordedSession, world_record
from teachbot.recording.compare import POSITION_TOLERANCE, Difference, compare_sessions
from teachbot.ros_env import configure_loopback

# the topic each LLM role's completions are published on (and recorded from)
ROLE_TOPICS = {"interaction": "interaction/completions", "function_generation": "interaction/completions",
               "correction": "interaction/completions", "improvement": "improvement/completions"}
SERVICE_WAIT = 10.0  # seconds for the simulator's services
SETTLE = 2.0  # seconds for messages still in flight on other topics once the person has left


class ReplayNode(Node):
    """The recorded person plus the judge of the replay; the verdict is in :attr:`report` once :attr:`finished` is set."""

    def __init__(self, recording: str = "", check: bool = True, timeout: float = 300.0,
                 tolerance: float = POSITION_TOLERANCE, namespace: str = "") -> None:
        """ROS parameters (also keyword arguments): recording (a bag directory), check (false: only play),
        timeout (seconds the whole conversation may take), tolerance (metres for object positions)."""
        super().__init__("replay", namespace=namespace)
        self.path = str(self.declare_parameter("recording", str(recording)).value)
        self.check = bool(self.declare_parameter("check", bool(check)).value)
        self.timeout = float(self.declare_parameter("timeout", float(timeout)).value)
        self.tolerance = float(self.declare_parameter("tolerance", float(tolerance)).value)
        if not self.path:
            raise ConfigError("the replay node needs a recording: --ros-args -p recording:=<bag directory>")
        refuse_duplicate(self)
        self.recorded = RecordedSession.load(self.path)  # a BagError names the file and what is wrong
        self.report: ReplayReport | None = None
        self.result = ""
        self.exit_status = 1
        self.finished = threading.Event()  # the verdict is in
        self._end = threading.Event()  # the conversation ended or went wrong: time to judge
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._problems: list[Difference] = []  # what kept the replay from running as recorded
        self.robot: list[str] = []
        self.completions: list[RecordedCompletion] = []
        self.result_pub = self.create_publisher(String, "replay/result", LATCHED_QOS)
        self.reset_client = self.create_client(ResetScene, "sim/reset")
        self.world_client = self.create_client(GetWorldState, "sim/get_world_state")
        self.create_subscription(DialogTurn, "dialog/robot", self.on_robot, COMMAND_QOS)
        for topic in sorted(set(ROLE_TOPICS.values())):
            self.create_subscription(LlmCompletion, topic, self.on_completion, TRANSCRIPT_QOS)
        self.person = ScriptedPerson(self, self.recorded.user, leave=self._end.set, on_line=self.on_line,
                                     prepare=self.restore_scene)
        self._started = time.monotonic()
        self._judge = threading.Thread(target=self._judge_when_over, daemon=True, name="replay-judge")
        self._judge.start()
        self.get_logger().info(
            f"replaying {self.path}: {len(self.recorded.user)} utterance(s), {len(self.recorded.completions)} recorded "
            f"LLM completion(s){'' if self.check else '; check:=false, only playing'}")

    # ------------------------------------------------------------------ what the replayed stack does
    def on_line(self, line: str) -> None:
        """A transcript line: the session ended, or (checking) the transcript left the recorded one."""
        if line.startswith(SESSION_END):
            self._end.set()
        elif self.check:
            replayed = self.person.transcript
            if replayed != self.recorded.transcript[:len(replayed)]:
                self._end.set()

    def on_robot(self, msg: DialogTurn) -> None:
        """What the robot said; an utterance the recording does not have at this point ends the replay."""
        with self._lock:
            self.robot.append(msg.text)
            said = list(self.robot)
        if self.check and said != self.recorded.robot[:len(said)]:
            self._end.set()

    def on_completion(self, msg: LlmCompletion) -> None:
        """An LLM call of the replay; a prompt other than the recorded one at this point ends the replay."""
        stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        with self._lock:
            self.completions.append(RecordedCompletion(msg.role, msg.prompt_digest, msg.prompt, msg.completion, stamp))
            got = [c.prompt_digest for c in self.completions if c.role == msg.role]
        want = [c.prompt_digest for c in self.recorded.completions_for(msg.role)]
        if self.check and got != want[:len(got)]:
            self._end.set()

    def restore_scene(self) -> None:
        """Reset the simulator to the recorded scene (before the person first speaks)."""
        spec = self.recorded.spec
        if spec.seed is None and not spec.scene_yaml:
            self.get_logger().warning("the recording holds no scene; replaying in the simulator's current one")
            return
        request = ResetScene.Request(seed=spec.seed or 0, scene_yaml="" if spec.seed is not None else spec.scene_yaml)
        if not self.reset_client.wait_for_service(timeout_sec=SERVICE_WAIT):
            return self._problem("scene", "sim/reset is not available: the recorded scene cannot be restored")
        try:
            reply = _call(self.reset_client, request, SERVICE_WAIT, "sim/reset")
        except TimeoutError as exc:
            return self._problem("scene", str(exc))
        if not reply.success:
            return self._problem("scene", f"the simulator refused the recorded scene: {reply.message}")
        self.get_logger().info(f"recorded scene restored: {reply.message}")

    def _problem(self, what: str, detail: str) -> None:
        with self._lock:
            self._problems.append(Difference(what, detail))
        self._end.set()

    # ------------------------------------------------------------------ the verdict
    def _judge_when_over(self) -> None:
        self._end.wait(self.timeout)
        if self._closing.is_set():
            return
        conversation = time.monotonic() - self._started
        self._settle()
        report, notes = self._compare(conversation)
        if self.check:
            verdict = report.render()
            if not report.ok and not verdict.startswith("DIVERGED"):
                verdict = f"DIVERGED: the replay differs from the recording\n{verdict}"
            text = "\n".join([verdict, *notes])
        else:
            text = (f"PLAYED: {self.person.answered} recorded utterance(s), the person left" if report.finished
                    else "DIVERGED: the replayed conversation did not reach its end in time")
        ok = report.ok if self.check else report.finished
        self.report, self.result, self.exit_status = report, text, 0 if ok else 1
        self.result_pub.publish(String(data=text))
        (self.get_logger().info if ok else self.get_logger().error)(text)
        self.finished.set()

    def _settle(self) -> None:
        """Once the person left, wait (briefly) for the robot's words and LLM calls the recording has still to arrive."""
        if not (self.person.left.is_set() or self.person.finished.is_set()):
            return
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline and not self._closing.is_set():
            with self._lock:
                robot, calls = len(self.robot), len(self.completions)
            if robot >= len(self.recorded.robot) and calls >= len(self._observable(self.recorded.completions)):
                return
            time.sleep(0.05)

    def _observable(self, completions: list[RecordedCompletion]) -> list[RecordedCompletion]:
        """The completions of roles whose topic someone publishes (the improvement node publishes none itself)."""
        silent = {role for role, topic in ROLE_TOPICS.items() if self.count_publishers(topic) == 0}
        return [c for c in completions if c.role not in silent]

    def _compare(self, conversation: float) -> tuple[ReplayReport, list[str]]:
        """The replay as a RecordedSession, compared with the recording; plus notes on what was not compared."""
        notes: list[str] = []
        expected = self.recorded
        left_where_recorded = self.person.left.is_set() and not self.person.finished.is_set()
        if left_where_recorded and expected.transcript and expected.transcript[-1].startswith(SESSION_END):
            episodes = [list(e) for e in expected.episodes]
            episodes[-1] = episodes[-1][:-1]
            expected = dataclasses.replace(expected, episodes=episodes)
        with self._lock:
            robot, calls, problems = list(self.robot), list(self.completions), list(self._problems)
        observable = self._observable(expected.completions)
        if len(observable) < len(expected.completions):
            roles = sorted({c.role for c in expected.completions} - {c.role for c in observable})
            notes.append(f"not compared: the {', '.join(roles)} LLM calls (nobody publishes their completions topic)")
            expected = dataclasses.replace(expected, completions=observable)
        worlds = []
        if self.check and expected.final_world is not None:
            world = self._final_world()
            if world is None:
                notes.append("not compared: the final world state (sim/get_world_state did not answer)")
                expected = dataclasses.replace(expected, world_states=[])
            else:
                worlds.append(world)
        replayed = RecordedSession(Path(self.path), expected.spec, calls, expected.user[:self.person.answered], robot,
                                   [self.person.transcript], worlds, {}, 0, 0, "")
        report = ReplayReport(Path(self.path), expected, replayed, differences=problems, conversation_wall=conversation,
                              wall=time.monotonic() - self._started,
                              finished=self._end.is_set())  # not woken by the timeout
        if self.check:
            report.differences += compare_sessions(expected, replayed, self.tolerance)
        return report, notes

    def _final_world(self) -> Any:
        if not self.world_client.wait_for_service(timeout_sec=SERVICE_WAIT):
            return None
        try:
            return world_record(_call(self.world_client, GetWorldState.Request(), SERVICE_WAIT, "sim/get_world_state"))
        except TimeoutError:
            return None

    def close(self) -> None:
        """Stop the person and the judge (a verdict not yet reached is dropped)."""
        self._closing.set()
        self._end.set()
        self.person.close()
        self._judge.join(timeout=2.0)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot replay --ros-args -p recording:=BAG``: spin until the verdict, exit 0 on a match, 1 otherwise."""
    if os.environ.get("TEACHBOT_LOOPBACK", "1") != "0":  # as every node's main (teachbot.nodes.common.run_nodes)
        configure_loopback(reserve_domain=False)
    rclpy.init(args=args)
    node: ReplayNode | None = None
    try:
        node = ReplayNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while not node.finished.is_set():
            executor.spin_once(timeout_sec=0.1)
        return node.exit_status
    except (KeyboardInterrupt, ExternalShutdownException):
        return 1  # stopped before the verdict
    except TeachbotError as exc:  # a missing or unreadable recording: one line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if node is not None:
            node.close()
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
