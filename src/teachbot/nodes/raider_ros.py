"""RAIDER (teachbot.raider) over ROS: the agent's tools from the perception node, checks from the
issue_detection node. The raider package stays ROS-free; this module is the bridge.

- :class:`RemoteTools`: a drop-in for :class:`teachbot.raider.tools.GroundedTools` in
  :class:`teachbot.raider.agent.RaiderAgent` (``call(name, args) -> str`` raising ``ToolError``)
  that asks the perception node's ``perception/grounded_tool`` service.
- :class:`IssueDetectionClient`: sends an action query to ``issue_detection/check`` and returns the
  :class:`~teachbot.raider.agent.CheckResult` (the console's checker, ``check(query)``).

Both use a node that some executor spins (the caller's, or ``spin_in_background()``), and both wait
from another thread than that executor's: a blocking call inside one of its callbacks would wait forever.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from teachbot_interfaces.action import IssueDetection
from teachbot_interfaces.srv import GroundedTool

from teachbot.errors import ControllerError
from teachbot.nodes.action_client import ActionClient
from teachbot.nodes.common import DONE, GONE, wait_served
from teachbot.nodes.grounded_tools_service import SERVICE as TOOLS_SERVICE
from teachbot.raider.agent import CheckResult, ToolUse
from teachbot.raider.tools import TOOL_DOCS, ToolError
from teachbot.tracing import trace_parent

ACTION = "issue_detection/check"
DISCOVERY_GRACE = 1.0  # seconds a just-started caller waits to discover a server it has not seen yet
# seconds an issue_detection node on the graph may take to accept a check (a loaded machine keeps its executor
# busy); one that leaves the graph is noticed within about 1 s (wait_served), not at the end of this
ACCEPT_TIMEOUT = 30.0
TOOL_TIMEOUT = 5.0  # seconds one tool call may take
FEEDBACK_QUIET = 0.05  # seconds without feedback after a result before a client takes its tool calls as complete


def _wait(future: Any, timeout: float) -> bool:
    """Whether ``future`` (an rclpy future spun elsewhere) completed within ``timeout`` seconds."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    return done.wait(timeout)


class RemoteTools:
    """The six grounded tools, answered by the perception node's ``perception/grounded_tool``."""

    def __init__(self, node: Node, timeout: float = TOOL_TIMEOUT, service: str = TOOLS_SERVICE, callback_group: Any = None) -> None:
        self.node = node
        self.timeout = timeout
        self.service = service
        self.client = node.create_client(GroundedTool, service, callback_group=callback_group)

    def functions(self) -> dict[str, Callable[..., str]]:
        """Tool name -> callable, as GroundedTools.functions()."""
        return {name: (lambda *args, _name=name: self.call(_name, list(args))) for name in TOOL_DOCS}

    def call(self, name: str, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> str:
        """Run tool ``name`` in the perception node; every failure is a ToolError that says what to do.
        Arguments travel as text; keyword arguments follow the positional ones in their order."""
        if not self.client.service_is_ready() and not self.client.wait_for_service(timeout_sec=DISCOVERY_GRACE):
            raise ToolError(f"the grounded tools are not available: no perception node serves {self.service}; "
                            "start it (ros2 run teachbot perception)")
        values = [*(args or []), *(kwargs or {}).values()]
        request = GroundedTool.Request(tool=str(name), args=[str(v) for v in values], trace_parent=trace_parent())
        future = self.client.call_async(request)
        if not _wait(future, self.timeout):
            self.client.remove_pending_request(future)
            raise ToolError(f"{self.service} did not answer {name}() within {self.timeout:g} s; is the perception node busy or stuck?")
        response = future.result()
        if response is None:
            raise ToolError(f"{self.service} gave no answer to {name}()")
        if not response.success:
            raise ToolError(response.message or f"{name}() failed")
        return str(response.answer)

    def close(self) -> None:
        self.node.destroy_client(self.client)


# ---------------------------------------------------------------------- results both ways
def result_msg(result: CheckResult) -> Any:
    """A CheckResult as an IssueDetection result (the tool calls travel as feedback, not here)."""
    return IssueDetection.Result(
        final_response=result.final_response, explanation=result.explanation, grounding=list(result.grounding),
        turns=int(result.turns), elapsed=float(result.elapsed), stopped=result.stopped,
        warnings=list(result.warnings), transcript=result.transcript,
    )


def check_result(query: str, msg: Any, tool_calls: list[ToolUse] | None = None) -> CheckResult:
    """An IssueDetection result (and the feedback's tool calls) as a CheckResult."""
    return CheckResult(
        query=query, final_response=msg.final_response, explanation=msg.explanation, grounding=list(msg.grounding),
        tool_calls=list(tool_calls or []), warnings=list(msg.warnings), turns=int(msg.turns), elapsed=float(msg.elapsed),
        stopped=msg.stopped, transcript=msg.transcript,
    )


def tool_use(feedback: Any) -> ToolUse:
    """One IssueDetection feedback as the ToolUse it reports."""
    return ToolUse(feedback.tool, list(feedback.args), feedback.answer, bool(feedback.ok))


class IssueDetectionClient:
    """``check(query) -> CheckResult`` through the issue_detection node (``issue_detection/check``).

    A missing node, or one that leaves the ROS graph before its verdict, is a
    :class:`~teachbot.errors.ControllerError`; a check that does not end within ``timeout`` is canceled and
    returned without a verdict (``stopped == "timeout"``). ``on_tool`` is told of each tool call as its
    feedback arrives."""

    def __init__(self, node: Node, timeout: float = 60.0, on_tool: Callable[[ToolUse], None] | None = None,
                 action: str = ACTION) -> None:
        self.node = node
        self.timeout = timeout
        self.on_tool = on_tool
        self.action = action
        self.client = ActionClient(node, IssueDetection, action)
        self._goal: Any = None
        self._executor: SingleThreadedExecutor | None = None
        self._thread: threading.Thread | None = None

    def spin_in_background(self) -> IssueDetectionClient:
        """Spin the client's node on a private executor thread (when nothing else spins it)."""
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True, name="issue-detection-client")
        self._thread.start()
        return self

    def check(self, query: str, timeout: float | None = None) -> CheckResult:
        """Check ``query`` (``grasp(milk)`` or a sentence); blocks until the verdict or ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        if not self.client.server_is_ready() and not self.client.wait_for_server(timeout_sec=DISCOVERY_GRACE):
            raise ControllerError(f"issue detection is not available: no issue_detection node serves {self.action}; "
                                  "start it (ros2 run teachbot issue_detection) with an LLM")
        started = time.monotonic()
        calls: list[ToolUse] = []

        def on_feedback(msg: Any) -> None:
            use = tool_use(msg.feedback)
            calls.append(use)
            if self.on_tool is not None:
                self.on_tool(use)

        sent = self.client.send_goal_async(IssueDetection.Goal(query=query, trace_parent=trace_parent()), feedback_callback=on_feedback)
        accept = min(timeout, ACCEPT_TIMEOUT)
        ended = wait_served(sent, accept, self.client.server_is_ready)
        if ended == GONE:
            raise ControllerError(f"the issue_detection node left the ROS graph before it accepted the check of {query!r} "
                                  "(killed or crashed); start it again")
        if ended != DONE:
            raise ControllerError(f"{self.action} did not accept the goal within {accept:g} s; is the node stuck?")
        handle = sent.result()
        if not handle.accepted:
            raise ControllerError(f"{self.action} rejected the check of {query!r}")
        self._goal = handle
        try:
            future = handle.get_result_async()
            ended = wait_served(future, max(timeout - (time.monotonic() - started), 0.0), self.client.server_is_ready)
            if ended == GONE:
                raise ControllerError(f"the issue_detection node left the ROS graph while it checked {query!r} "
                                      "(killed or crashed); no verdict. Start it again")
            if ended != DONE:
                _wait(handle.cancel_goal_async(), 2.0)
                return CheckResult(query, "", f"no verdict from {self.action} within {timeout:g} s; the check was canceled",
                                   tool_calls=calls, elapsed=time.monotonic() - started, stopped="timeout")
            result = future.result().result
            self._settle(lambda: len(calls))
            return check_result(query, result, calls)
        finally:
            self._goal = None

    @staticmethod
    def _settle(count: Callable[[], int], quiet: float = FEEDBACK_QUIET, most: float = 0.5) -> None:
        """Feedback and result travel on different channels: wait until no feedback came for ``quiet`` s."""
        deadline = time.monotonic() + most
        seen = count()
        while time.monotonic() < deadline:
            time.sleep(quiet)
            if count() == seen:
                return
            seen = count()

    def cancel(self, timeout: float = 2.0) -> bool:
        """Cancel the running check (from another thread); whether there was one to cancel."""
        handle = self._goal
        if handle is None:
            return False
        return _wait(handle.cancel_goal_async(), timeout)

    def close(self) -> None:
        """Stop the private executor (if any) and take the action client off the graph."""
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=1.0)
            if self._thread is not None:
                self._thread.join(timeout=2.0)
            self._executor = None
        self.client.destroy()
