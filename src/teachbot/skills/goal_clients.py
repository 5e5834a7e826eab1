"""Whether the action client that sent a running goal is still there (ROS-free; the skills node asks the graph).

A ROS 2 goal does not say which client sent it (rclpy does not show the request's writer), so the watch
takes the endpoints that could have sent it when it starts running: the subscriptions to the action's
feedback topic whose node also has a client of the action's ``send_goal`` service (an action client
makes both; a recorder that only listens to the feedback is not one). The goal is orphaned once every
one of those endpoints has left the graph. Endpoints are told apart by their GID, so a restarted client
node of the same name is not taken for the one that left. Where several clients could have sent the
goal, it is orphaned only when all of them left: a goal is never cancelled while its client may live.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

NodeName = tuple[str, str]  # (name, namespace)
# endpoint GID -> the node that holds it, for every subscription to the action's feedback topic now on the graph
Subscribers = Callable[[], Mapping[Hashable, NodeName]]


def node_text(node: NodeName) -> str:
    """``/namespace/name`` as ``ros2 node list`` shows it."""
    name, namespace = node
    return f"{namespace.rstrip('/')}/{name}"


class GoalClientWatch:
    """Tells when every endpoint that could have sent one running goal has left the graph."""

    def __init__(self, subscribers: Subscribers, sends_goals: Callable[[NodeName], bool]) -> None:
        self._subscribers = subscribers
        self._sends_goals = sends_goals
        self._candidates: dict[Hashable, NodeName] = {}  # taken at the first look that finds one

    @property
    def candidates(self) -> list[str]:
        """The client nodes that could have sent the goal (empty until one was seen)."""
        return sorted({node_text(node) for node in self._candidates.values()})

    def left(self) -> str:
        """'' while the goal's client is, or may be, on the graph; else the node(s) that left, for a log line.

        Until a client was seen (discovery may lag behind the goal) each call looks again; nothing is
        orphaned before a client was seen."""
        present = self._subscribers()
        if not self._candidates:
            self._candidates = {gid: node for gid, node in present.items() if self._sends_goals(node)}
            return ""
        if any(gid in present for gid in self._candidates):
            return ""
        return ", ".join(self.candidates)
