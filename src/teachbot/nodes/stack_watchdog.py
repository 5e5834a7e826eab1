"""Fail-safe for the interaction manager: a node the robot depends on that dies during a motion stops the motion.

While the console runs a skill (the SkillClient has goals in flight), :class:`StackWatchdog` looks at the ROS
graph every :data:`POLL` seconds. When one of the :data:`WATCHED` nodes that was on the graph leaves it (killed
with ``kill -9`` or crashed: Fast DDS drops it after the lease of config/fastdds_localhost.xml), the interaction
manager cancels the goals in flight with a :class:`StackFault` as the reason, and the running skill call raises
that one error line. The skills and sim nodes are not watched here: a skill call notices a vanished skills node
itself (teachbot.nodes.skill_client), and the skills node fails a skill whose joint states stop.

Nodes are told apart by the gid of their /rosout publisher, so a node restarted before its killed predecessor's
lease ran out still counts as gone. A node absent when a motion starts is not watched during it: a stack
without perception never complains, and a statement that needs a missing node fails on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from teachbot.errors import ControllerError

WATCHED = ("perception", "memory", "improvement", "issue_detection")
POLL = 0.05  # seconds between looks at the graph while a motion runs (idle: only the goals in flight are checked)
RESTART_HINT = "teachbot sim --processes and ros2 launch restart it, else: ros2 run teachbot {node}"


class StackFault(ControllerError):
    """A node of the stack left the ROS graph (killed or crashed) while the robot needed it."""


def motion_fault(node: str, skill: str, outcome: str) -> StackFault:
    """The error of a skill call that was stopped because ``node`` left the graph; ``outcome``: what the arm did."""
    return StackFault(f"the {node} node left the ROS graph (killed or crashed) while {skill} was running; {outcome}. "
                      f"Ask again once it is back ({RESTART_HINT.format(node=node)})")


def call_fault(node: str, call: str, outcome: str) -> StackFault:
    """The error of a service call (``call``, e.g. learn_from_interaction()) whose node left the graph meanwhile."""
    return StackFault(f"the {node} node left the ROS graph (killed or crashed) during {call}; {outcome}. "
                      f"Ask again once it is back ({RESTART_HINT.format(node=node)})")


class GraphWatch:
    """Which watched nodes leave the graph during one motion (no ROS: :class:`StackWatchdog` feeds it).

    ``present`` maps each watched node on the graph to the gids of its /rosout publishers (empty while they are
    not discovered yet). A node is watched from the first look of a motion at which it is present, and it has
    left when its name is gone or all of its publishers are new ones (a restart). Each departure is told once.
    """

    def __init__(self, names: Iterable[str] = WATCHED) -> None:
        self.names = tuple(names)
        self._watched: dict[str, frozenset[str]] | None = None  # None: no motion runs

    def idle(self) -> None:
        """No motion runs: the next one starts watching afresh."""
        self._watched = None

    def moving(self, present: Mapping[str, frozenset[str]]) -> list[str]:
        """One look during a motion: the watched nodes that have left since the last look."""
        if self._watched is None:
            self._watched = {}
        left = []
        for name, gids in list(self._watched.items()):
            now = present.get(name)
            if now is None or (gids and now and not gids & now):
                left.append(name)
                del self._watched[name]
            elif not gids:
                self._watched[name] = now
        for name in self.names:
            if name not in self._watched and name not in left and name in present:
                self._watched[name] = present[name]
        return left


class StackWatchdog:
    """Looks at ``node``'s graph while ``in_flight()`` names running skills; ``on_left(node, skills)`` is called,
    on the executor, for each watched node that leaves meanwhile (it must not wait for the executor)."""

    def __init__(self, node: Node, in_flight: Callable[[], list[str]], on_left: Callable[[str, list[str]], None],
                 names: Iterable[str] = WATCHED, period: float = POLL) -> None:
        self.node, self.in_flight, self.on_left = node, in_flight, on_left
        self.watch = GraphWatch(names)
        namespace = node.get_namespace()
        self._namespaces = {"/", namespace.rstrip("/") or "/"}  # the stack's nodes: beside this one, or at the root
        self.timer = node.create_timer(period, self.on_tick, callback_group=MutuallyExclusiveCallbackGroup())

    def on_tick(self) -> None:
        running = self.in_flight()
        if not running:
            self.watch.idle()
            return
        for name in self.watch.moving(self.present()):
            self.on_left(name, running)

    def present(self) -> dict[str, frozenset[str]]:
        """The watched nodes on the graph now, each with the gids of its /rosout publishers."""
        names = set(self.watch.names)
        found: dict[str, set[str]] = {n: set() for n, ns in self.node.get_node_names_and_namespaces()
                                      if n in names and (ns.rstrip("/") or "/") in self._namespaces}
        for info in self.node.get_publishers_info_by_topic("/rosout"):
            if info.node_name in found and (info.node_namespace.rstrip("/") or "/") in self._namespaces:
                found[info.node_name].add(bytes(info.endpoint_gid).hex())
        return {name: frozenset(gids) for name, gids in found.items()}

    def close(self) -> None:
        self.node.destroy_timer(self.timer)
