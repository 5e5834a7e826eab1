"""The interaction manager's side of confirm-before-store (teachbot.interaction.confirm), over ROS.

- the ``confirm_lessons`` parameter (config/interaction.yaml's value at start; set at run time by the web page or
  ``ros2 param set /interaction_manager confirm_lessons true``) switches the console's mode;
- improvement/improve gets ``candidate_only`` (and the person's own sentence) from the core's request, and its
  reply's example becomes the core's candidate;
- a lesson the person confirmed is stored through memory/add;
- the lesson waiting for the person's answer is published on interaction/pending_lesson (InteractionExample,
  transient local; an empty one when none waits), so the page can show it with its buttons.

And of a lesson kept once the person accepts the corrected task (teachbot.interaction.pending): improvement/improve
gets the core's ``defer`` and answers ``pending``; the core's ``keep`` goes to improvement/keep_lesson with the scene
the person accepted (the improvement node rehearses the lesson and stores it only when it ends there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from builtin_interfaces.msg import Time
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.srv import AddExample, KeepLesson

from teachbot.interaction import LearnReply, LearnRequest
from teachbot.memory.example import InteractionExample
from teachbot.nodes.common import LATCHED_QOS
from teachbot.nodes.memory_node import from_msg, to_msg
from teachbot.simrobot.snapshot import scene_to_json

PARAMETER = "confirm_lessons"


class ConfirmedLessons:
    """Created in the manager's constructor before its core; :meth:`attach` gives it the core once built."""

    def __init__(self, node: Node, enabled: bool, call: Callable[[Any, Any, float, str], Any]) -> None:
        """``call(client, request, timeout, what)`` is the manager's service call with a timeout."""
        self.node, self._call, self.core = node, call, None
        node.declare_parameter(PARAMETER, bool(enabled))
        node.add_on_set_parameters_callback(self.on_parameters)
        self.publisher = node.create_publisher(ExampleMsg, "interaction/pending_lesson", LATCHED_QOS)
        self.memory = node.create_client(AddExample, "memory/add")
        self.keeper = node.create_client(KeepLesson, "improvement/keep_lesson")

    def attach(self, core: Any) -> None:
        """The console core whose ``confirm_lessons`` the parameter sets."""
        self.core = core
        core.confirm_lessons = bool(self.node.get_parameter(PARAMETER).value)

    def on_parameters(self, parameters: list[Parameter]) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name != PARAMETER:
                continue
            if parameter.type_ != Parameter.Type.BOOL:
                return SetParametersResult(successful=False, reason=f"{PARAMETER} is true or false")
            if self.core is not None:
                self.core.confirm_lessons = bool(parameter.value)
            self.node.get_logger().info(f"confirm-before-store {'on' if parameter.value else 'off'}")
        return SetParametersResult(successful=True)

    def pending(self, lesson: InteractionExample | None) -> None:
        """The core's on_pending_lesson: the candidate while the person is asked, None once answered."""
        self.publisher.publish(to_msg(lesson) if lesson is not None else ExampleMsg())

    @staticmethod
    def fields(request: LearnRequest) -> dict[str, Any]:
        """The Improve request's confirm-before-store fields for the core's request."""
        return {"candidate_only": not request.store, "problem": request.problem, "improvement": request.improvement,
                "defer": request.defer}

    @staticmethod
    def reply(reply: Any) -> LearnReply:
        """The core's LearnReply of an Improve response (its example: the lesson stored or the candidate)."""
        lesson = from_msg(reply.example) if reply.example.transcript else None
        return LearnReply(bool(reply.stored), str(reply.message), lesson, str(reply.example_id), tuple(reply.knowledge),
                          bool(reply.pending))

    def store(self, lesson: InteractionExample, timeout: float) -> LearnReply:
        """Store a lesson the person confirmed through memory/add (the core's LearningCall.store)."""
        if not self.memory.service_is_ready():
            return LearnReply(False, "the memory node is not running (memory/add)")
        try:
            stored = self._call(self.memory, AddExample.Request(example=to_msg(lesson), confirmed=True), timeout, "memory/add")
        except TimeoutError as exc:
            return LearnReply(False, str(exc))
        if not stored.success:
            return LearnReply(False, f"the lesson could not be stored: {stored.message}")
        self.node.get_logger().info(f"lesson stored as {stored.id} after the person confirmed it")
        return LearnReply(True, str(stored.message), lesson.replace(id=stored.id), str(stored.id))

    def keep(self, request: LearnRequest, lesson: InteractionExample, timeout: float) -> LearnReply:
        """A pending lesson, the person having accepted the corrected task: improvement/keep_lesson (the core's
        LearningCall.keep); not kept when the improvement node is gone."""
        if not self.keeper.service_is_ready():
            return LearnReply(False, "the improvement node is not running (improvement/keep_lesson)")
        sec = int(request.deadline)
        try:
            kept = self._call(self.keeper, KeepLesson.Request(
                example=to_msg(lesson), initial_scene=scene_to_json(request.initial_scene),
                accepted_scene=scene_to_json(request.accepted_scene), learned_scene=scene_to_json(request.learned_scene),
                deadline=Time(sec=sec, nanosec=int((request.deadline - sec) * 1e9))), timeout, "improvement/keep_lesson")
        except TimeoutError as exc:
            return LearnReply(False, str(exc))
        return LearnReply(bool(kept.stored), str(kept.message), lesson.replace(id=kept.example_id) if kept.stored else lesson,
                          str(kept.example_id))
