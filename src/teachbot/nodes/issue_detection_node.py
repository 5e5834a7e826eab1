"""ROS 2 node ``issue_detection``: RAIDER's issue detection before acting, as the action ``issue_detection/check``.

Goal: an action query (``grasp(milk)`` or a sentence). Result: the verdict (ambiguity, unfeasibility,
none; '' with ``stopped`` saying why there is none), its explanation, grounding, turns, elapsed time,
the program flow manager's warnings and the conversation. Feedback: one message per tool call, with its
answer, as the call returns. The agent (teachbot.raider.agent.RaiderAgent) runs with the LLM of role
``issue_detection`` (config/llm.yaml) and asks its grounded tools of the perception node
(``perception/grounded_tool``, through teachbot.nodes.raider_ros.RemoteTools).

One check at a time: a goal that arrives while another check runs is accepted and aborted at once
with ``stopped == "busy"`` and an explanation that says which check runs (not queued: a verdict about
a scene that changed while it waited would mislead). Cancel stops a check between model turns
(``stopped == "canceled"``); a model call already under way finishes first.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from typing import Any

from opentelemetry.trace import SpanKind
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from teachbot_interfaces.action import IssueDetection
from teachbot_interfaces.msg import LlmCompletion

from teachbot.errors import ConfigError
from teachbot.llm.base import ChatReply, Completion, LLMError, Model, ToolChatModel
from teachbot.llm.factory import model_from_config
from teachbot.nodes.common import TRANSCRIPT_QOS, completion_publisher, refuse_duplicate, run_nodes, wait_for_worker
from teachbot.nodes.nodeset import LLM_PARAMETERS, WORLDS, llm_settings
from teachbot.nodes.raider_ros import ACTION, TOOL_TIMEOUT, RemoteTools, result_msg
from teachbot.raider.agent import CheckResult, RaiderAgent
from teachbot.raider.config import RaiderConfig
from teachbot.raider.tools import ToolError
from teachbot.tracing import set_attributes, span

ROLE = "issue_detection"
CANCELED = "the check was canceled"


def with_role(raw: dict[str, Any], role: str) -> dict[str, Any]:
    """The LLM config with ``role`` under ``llm.roles`` (empty: the defaults) when the file has none, as an
    llm.yaml written before this role still configures it; ``raw`` itself is not changed."""
    section = raw.get("llm", raw)
    roles = section.get("roles") if isinstance(section, dict) else None
    if not isinstance(section, dict) or (roles is not None and not isinstance(roles, dict)) or role in (roles or {}):
        return raw
    out = copy.deepcopy(raw)
    (out.get("llm", out)).setdefault("roles", {})[role] = {}
    return out


class CanceledCheck(LLMError):
    """Raised instead of the next model turn once the goal is canceled."""


class _Cancellable:
    """A model that refuses its next turn once ``cancelled()`` holds (the agent then stops the check)."""

    def __init__(self, model: Model, cancelled: Callable[[], bool]) -> None:
        self.model = model
        self.cancelled = cancelled

    @property
    def name(self) -> str:
        return self.model.name

    def _go_on(self) -> None:
        if self.cancelled():
            raise CanceledCheck(CANCELED)

    def generate(self, prompt: str, stop: Sequence[str] | None = None, **kwargs: Any) -> Completion:
        self._go_on()
        return self.model.generate(prompt, stop, **kwargs)


class _CancellableTools(_Cancellable):
    """The same for a model with native tool calling."""

    def chat_tools(self, messages: Sequence[dict], tools: Sequence[dict], *, timeout: float | None = None) -> ChatReply:
        self._go_on()
        assert isinstance(self.model, ToolChatModel)
        return self.model.chat_tools(messages, tools, timeout=timeout)


def cancellable(model: Model, cancelled: Callable[[], bool]) -> _Cancellable:
    """``model`` that stops before a turn once ``cancelled()``; native tool calling kept where it has it."""
    return _CancellableTools(model, cancelled) if isinstance(model, ToolChatModel) else _Cancellable(model, cancelled)


class ReportingTools:
    """Tools that report each call (name, args, answer or error, ok) to ``report`` as it returns."""

    def __init__(self, tools: Any, report: Callable[[str, list[Any], str, bool], None]) -> None:
        self.tools = tools
        self.report = report

    def call(self, name: str, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> str:
        values = [*(args or []), *(kwargs or {}).values()]
        try:
            answer = self.tools.call(name, args, kwargs) if kwargs else self.tools.call(name, args)
        except ToolError as exc:
            self.report(name, values, str(exc), False)
            raise
        self.report(name, values, answer, True)
        return answer


class IssueDetectionNode(Node):
    """Serves issue_detection/check; one check at a time."""

    def __init__(self, model: Model | None = None, tools: Any = None, **overrides: Any) -> None:
        """ROS parameters (also keyword arguments): world (tabletop | household), config (the raider config),
        tool_timeout (seconds per tool call), llm_config, llm_backend, llm_model, llm_base_url; any other
        keyword overrides a key of the raider section (e.g. ``time_limit``). ``model`` and ``tools`` replace
        the configured LLM and the perception node's tools (tests)."""
        super().__init__("issue_detection")
        for name, default in (("world", "tabletop"), ("config", "raider"), *((key, "") for key in LLM_PARAMETERS)):
            self.declare_parameter(name, str(overrides.pop(name, default)))
        self.declare_parameter("tool_timeout", float(overrides.pop("tool_timeout", TOOL_TIMEOUT)))
        self.world = str(self.get_parameter("world").value or "tabletop")
        if self.world not in WORLDS:
            self.destroy_node()
            raise ConfigError(f"issue_detection: world must be one of {', '.join(WORLDS)}, got {self.world!r}")
        config = RaiderConfig.load(str(self.get_parameter("config").value))
        unknown = sorted(set(overrides) - {f.name for f in fields(RaiderConfig)} - {"source"})
        if unknown:
            self.destroy_node()
            raise ConfigError(f"IssueDetectionNode does not take {unknown}; raider keys: {sorted(f.name for f in fields(RaiderConfig))}")
        self.config = replace(config, **overrides)
        refuse_duplicate(self)
        llm = {k: str(self.get_parameter(k).value) for k in LLM_PARAMETERS}
        self.model = model or model_from_config(with_role(llm_settings(**llm), ROLE), ROLE)
        add = getattr(self.model, "add_listener", None)
        if add is not None:  # every model turn, with its prompt digest, so a recorded session can be replayed
            add(completion_publisher(self, self.create_publisher(LlmCompletion, "issue_detection/completions", TRANSCRIPT_QOS), ROLE))
        group = ReentrantCallbackGroup()  # the tool answers arrive while a check's coroutine waits
        self.tools = tools if tools is not None else RemoteTools(self, float(self.get_parameter("tool_timeout").value),
                                                                 callback_group=group)
        self._goal: Any = None  # the goal being checked
        self._running = ""  # its query
        self._busy = threading.Lock()
        self._closing = threading.Event()
        self.agent = RaiderAgent(cancellable(self.model, self._cancel_requested), ReportingTools(self.tools, self._feedback),
                                 self.world, self.config)
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="issue-check")
        self._server = ActionServer(
            self, IssueDetection, ACTION, execute_callback=self.execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT, cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=group,
        )
        self.get_logger().info(f"issue detection ready: world {self.world}, model {self.model.name}, "
                               f"prompt {self.config.prompt}, {self.agent.tool_calling} tool calls")

    def _cancel_requested(self) -> bool:
        goal = self._goal
        return self._closing.is_set() or (goal is not None and goal.is_cancel_requested)

    def _feedback(self, tool: str, args: list[Any], answer: str, ok: bool) -> None:
        goal = self._goal
        if goal is not None:
            goal.publish_feedback(IssueDetection.Feedback(tool=tool, args=[str(a) for a in args], answer=answer, ok=ok))

    async def execute(self, goal_handle: Any) -> Any:
        """Run one check on the worker thread while this coroutine waits (the executor keeps spinning)."""
        query = str(goal_handle.request.query)
        if not self._busy.acquire(blocking=False):
            goal_handle.abort()
            return result_msg(CheckResult(query, "", f"another check is running ({self._running!r}); wait for its verdict "
                                                     "or cancel it", stopped="busy"))
        try:
            self._goal, self._running = goal_handle, query
            result = await wait_for_worker(self, self._workers.submit(self._check, query, str(goal_handle.request.trace_parent)))
        finally:
            self._goal, self._running = None, ""
            self._busy.release()
        if result.stopped == "canceled" and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.final_response:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        self.get_logger().info(f"check {query!r}: {result.final_response or 'no verdict (' + result.stopped + ')'} "
                               f"after {result.turns} turns, {result.elapsed:.1f} s")
        return result_msg(result)

    def _check(self, query: str, parent: str = "") -> CheckResult:
        """One check as an ``issue.check`` span of the caller's trace: the query, the verdict, the tool calls."""
        with span("issue.check", {"issue.query": query}, parent=parent, node=self.get_name(), kind=SpanKind.SERVER) as current:
            result = self._verdict(query)
            set_attributes(current, {"issue.verdict": result.final_response or f"no verdict ({result.stopped})",
                                     "issue.explanation": result.explanation, "issue.turns": result.turns})
            return result

    def _verdict(self, query: str) -> CheckResult:
        try:
            result = self.agent.check(query)
        except ValueError as exc:  # an empty query
            return CheckResult(query, "", str(exc), stopped="error")
        except Exception as exc:  # noqa: BLE001 - a failing check is an answer, not a crashed node
            return CheckResult(query, "", f"the check failed: {type(exc).__name__}: {exc}", stopped="error")
        if result.stopped == "llm_error" and self._cancel_requested():
            result.stopped, result.explanation = "canceled", CANCELED
        return result

    def close(self) -> None:
        """Take the action server off the graph and stop the worker (a running check ends at its next turn)."""
        self._closing.set()
        self._server.destroy()
        self._workers.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot issue_detection``."""
    return run_nodes([IssueDetectionNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
