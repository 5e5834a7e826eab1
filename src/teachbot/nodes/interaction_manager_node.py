"""ROS 2 node ``interaction_manager``: the console loop, with the robot API proxied to the other nodes.

In:  dialog/user (DialogTurn), the object list topic of config/interaction.yaml (perception/objects).
Out: dialog/robot (DialogTurn), interaction/transcript (TranscriptUpdate, every statement and result),
     interaction/completions (LlmCompletion with the prompt digest, so a bag can replay the session).
Uses the skills' actions through a SkillClient. The LLM backends come from config/llm.yaml.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from rclpy.node import Node
from teachbot_interfaces.msg import DialogTurn, LlmCompletion, ObjectList, TranscriptUpdate
from teachbot_interfaces.srv import Improve, RetrieveExamples

from teachbot.config import load_yaml, resolve_config
from teachbot.console.dialog import DialogChannel
from teachbot.console.prompt import FileExamples, PromptBuilder
from teachbot.console.registry import NotAvailableError, RobotApi
from teachbot.console.sandbox import SandboxExecutor, SandboxLimits
from teachbot.console.session import ConsoleSession, SessionConfig
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.console.transcript import Entry
from teachbot.llm.base import Model
from teachbot.llm.factory import model_from_config
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, TRANSCRIPT_QOS, completion_publisher, refuse_duplicate, run_nodes
from teachbot.nodes.skill_client import SkillClient
from teachbot.nodeset import LLM_PARAMETERS, llm_settings

LEARN_TIMEOUT = 180.0  # seconds for the improvement LLM's whole chain


class InteractionManagerNode(Node):
    """Runs console episodes one after another on a session thread."""

    def __init__(
        self, interaction_model: Model | None = None, function_model: Model | None = None, namespace: str = "",
        **overrides: Any,
    ) -> None:
        super().__init__("interaction_manager", namespace=namespace)
        # ROS parameters, also keyword arguments; any other keyword overrides a key of config/interaction.yaml
        for name, default in (("config", "interaction"), *((key, "") for key in LLM_PARAMETERS)):
            self.declare_parameter(name, str(overrides.pop(name, default)))
        cfg = load_yaml(resolve_config(str(self.get_parameter("config").value)))["interaction"]
        cfg.update(overrides)
        refuse_duplicate(self)
        self.api = RobotApi.load(str(cfg["api_profile"]))
        self.robot_pub = self.create_publisher(DialogTurn, "dialog/robot", COMMAND_QOS)
        # a console that joins late (teachbot chat) still gets the recent transcript
        self.transcript_pub = self.create_publisher(TranscriptUpdate, "interaction/transcript", TRANSCRIPT_QOS)
        self.completion_pub = self.create_publisher(LlmCompletion, "interaction/completions", TRANSCRIPT_QOS)
        self.dialog = DialogChannel(self._say, timeout=float(cfg["dialog_timeout"]))
        self.create_subscription(DialogTurn, "dialog/user", self.on_user, COMMAND_QOS)
        self._objects: dict[str, list[float]] | None = None  # None until the first object list arrives
        self.objects_topic = str(cfg["objects_topic"])
        self.create_subscription(ObjectList, self.objects_topic, self.on_objects, LATCHED_QOS)
        self.skills = SkillClient(self)
        self.skill_timeout = float(cfg["skill_timeout"])
        robot = TabletopRobot(_TimedSkills(self.skills, self.skill_timeout), self._current_objects, self.dialog)
        implementations = robot.functions() if self.api.profile == "tabletop" else {
            "wait_for_trigger": self.dialog.wait_for_trigger, "ask": self.dialog.ask, "say": self.dialog.say}
        implementations["learn_from_interaction"] = self.learn_from_interaction
        if "list_objects" in self.api.names:  # the household profile's object function, from the same list
            implementations["list_objects"] = self.list_objects
        self.improve_client = self.create_client(Improve, "improvement/improve")
        self.retrieve_client = self.create_client(RetrieveExamples, "memory/retrieve")
        self.functions = self.api.bind(implementations)
        llm_raw = llm_settings(**{key: str(self.get_parameter(key).value) for key in LLM_PARAMETERS})
        self.model = interaction_model or model_from_config(llm_raw, "interaction")
        self.function_model = function_model or model_from_config(llm_raw, "function_generation")
        for role, model in (("interaction", self.model), ("function_generation", self.function_model)):
            add = getattr(model, "add_listener", None)
            if add is not None:
                add(completion_publisher(self, self.completion_pub, role))
        self.session_config = SessionConfig.from_config(cfg.get("session", {}))
        self.prompts = PromptBuilder.for_profile(self.api, MemoryExamples(self.retrieve_client, FileExamples()), int(cfg["examples_k"]))
        limits = SandboxLimits.from_config(load_yaml(resolve_config("sandbox")).get("limits", {}))
        self.executor_sandbox = SandboxExecutor(self.functions, limits, on_kill=self.skills.cancel_all)
        self.episode_id = ""
        self.session: ConsoleSession | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._episodes, daemon=True, name="console")
        self._thread.start()
        self.get_logger().info(f"interaction manager ready: profile {self.api.profile}, model {self.model.name}")

    # ------------------------------------------------------------------ topics
    def on_user(self, msg: DialogTurn) -> None:
        self.dialog.put_user(msg.text)

    def on_objects(self, msg: ObjectList) -> None:
        self._objects = {o.name: [o.pose.position.x, o.pose.position.y, o.pose.position.z] for o in msg.objects}

    def _current_objects(self) -> dict[str, list[float]]:
        if self._objects is None:
            raise NotAvailableError(
                f"no object list has arrived on {self.objects_topic}; start the perception (or sim) node"
            )
        return dict(self._objects)

    def list_objects(self) -> list[str]:
        """Names of the objects perception knows about."""
        return sorted(self._current_objects())

    def _say(self, text: str) -> None:
        msg = DialogTurn(speaker="robot", type="dialog", text=text)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.robot_pub.publish(msg)

    def _publish_entry(self, entry: Entry) -> None:
        session = self.session
        msg = TranscriptUpdate(episode_id=self.episode_id, lines=entry.render().split("\n"))
        msg.first_line = max(0, sum(len(e.render().split("\n")) for e in session.transcript.entries) - len(msg.lines)) if session else 0
        msg.header.stamp = self.get_clock().now().to_msg()
        self.transcript_pub.publish(msg)

    # ------------------------------------------------------------------ learning
    def learn_from_interaction(self) -> str | None:
        """Send this episode's transcript to the improvement node; say what will be done differently."""
        if not self.improve_client.service_is_ready():
            raise NotAvailableError("learn_from_interaction() is not available: the improvement node is not running "
                                    "(ros2 run teachbot improvement)")
        session = self.session
        request = Improve.Request(profile=self.api.profile, episode_id=self.episode_id,
                                  transcript=session.transcript.render() if session else "")
        reply = _call(self.improve_client, request, LEARN_TIMEOUT, "improvement/improve")
        if not reply.stored:
            return f"nothing learned: {reply.message}"
        self.dialog.say(f"Got it. Next time: {reply.message[0].lower() + reply.message[1:] if reply.message else ''}")
        return None

    # ------------------------------------------------------------------ episodes
    def _episodes(self) -> None:
        while not self._stopping.is_set():
            self.episode_id = uuid.uuid4().hex[:12]
            self.executor_sandbox.reset()
            self.session = ConsoleSession(
                self.executor_sandbox, self.model, self.prompts, function_model=self.function_model,
                config=self.session_config, on_entry=self._publish_entry,
            )
            try:
                reason = self.session.run()
            except Exception as exc:  # noqa: BLE001 - an LLM outage ends the episode, not the node
                reason = f"{type(exc).__name__}: {exc}"
                self._say(f"I have a problem and stopped: {exc}")
                self._stopping.wait(2.0)  # do not hammer a failing endpoint
            self.get_logger().info(f"episode {self.episode_id} ended: {reason}")
            if "ended the session" in reason:
                return
            if not reason.startswith(("LLMError", "I have")):
                self._say(f"I stopped: {reason}. Please tell me again what to do.")
            self._stopping.wait(1.0)  # a model that keeps failing must not spin the loop

    def close(self) -> None:
        self._stopping.set()
        self.dialog.close()
        self._thread.join(timeout=5.0)
        self.executor_sandbox.close()
        self.skills.close()


def _call(client: Any, request: Any, timeout: float, what: str) -> Any:
    """A service call from a non-executor thread, with an overall timeout."""
    done = threading.Event()
    future = client.call_async(request)
    future.add_done_callback(lambda _f: done.set())
    if not done.wait(timeout):
        raise TimeoutError(f"{what} did not answer within {timeout:.0f} s")
    return future.result()


class MemoryExamples:
    """Examples from the memory node's retrieval when it runs, else from the seed files."""

    def __init__(self, client: Any, fallback: FileExamples) -> None:
        self.client, self.fallback = client, fallback

    def examples(self, profile: str, instructions: list[str], k: int) -> list[str]:
        if not self.client.service_is_ready():
            return self.fallback.examples(profile, instructions, k)
        request = RetrieveExamples.Request(profile=profile, instructions=list(reversed(instructions)), k=k)
        try:
            reply = _call(self.client, request, 10.0, "memory/retrieve")
        except TimeoutError:
            return self.fallback.examples(profile, instructions, k)
        return [_with_scope(e) for e in reply.examples]


def _with_scope(example: Any) -> str:
    """A learned example is shown with the condition it was taught under (scoped learning)."""
    if example.source == "learned" and example.scope:
        return f"# learned lesson, applies {example.scope.rstrip('.')}: {example.improvement}\n{example.transcript}"
    return example.transcript


class _TimedSkills:
    """The SkillClient with the configured per-call timeout."""

    def __init__(self, client: SkillClient, timeout: float) -> None:
        self.client, self.timeout = client, timeout

    def call(self, name: str, timeout: float = 0.0, **fields: Any) -> Any:
        return self.client.call(name, timeout=timeout or self.timeout, **fields)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot interaction_manager``."""
    return run_nodes([InteractionManagerNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
