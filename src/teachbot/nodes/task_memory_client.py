"""The interaction manager's side of the task memory: the memory node's services as a TaskMemory, with the
same store opened in this process when the memory node does not answer, and the world from perception.

:class:`RemoteTaskMemory` has the methods :class:`teachbot.taskmemory.ConsoleTaskMemory` calls (begin,
log_action, working, declarative, recall, tasks, config) over memory/begin_task, memory/log_task_action and
memory/query_task_memory; a missing or silent service is ``MemoryUnavailable``, a refused request (an
unknown task) a ``ValueError`` with the node's message, which the console shows the coordinator.
:class:`FallbackTaskMemory` asks the remote one first and, while it is unavailable, a local
:class:`teachbot.taskmemory.TaskMemory` on the same directory (the logs are safe for several processes).
:func:`perceived_environment` says what is where from the object list and the household's thing states.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rclpy.node import Node
from teachbot_interfaces.srv import BeginTask, LogTaskAction, QueryTaskMemory

from teachbot.interaction import MemoryUnavailable
from teachbot.nodes.task_memory_service import (
    BEGIN_SERVICE,
    LOG_SERVICE,
    QUERY_RECALL,
    QUERY_SERVICE,
    arguments_to_json,
    environment_to_msgs,
    working_from_json,
)
from teachbot.taskmemory import ObjectInfo, TaskMemory, TaskMemoryConfig, WorkingMemory
from teachbot.taskmemory.environment import Seen, color_of, environment

Environment = Mapping[str, ObjectInfo]
Call = Callable[[Any, Any, float, str], Any]  # (client, request, timeout, what) -> the reply, or TimeoutError


def perceived_environment(positions: Mapping[str, Sequence[float]], sizes: Mapping[str, Sequence[float]],
                          labels: Mapping[str, str], things: Mapping[str, tuple[str, str, bool]],
                          colors: Mapping[str, object], type_colors: Mapping[str, str]) -> dict[str, ObjectInfo]:
    """What is where among the perceived objects (``positions``, ``sizes`` and detector ``labels`` by name),
    with their ``things`` states (type, place, held) and colours (the name's colour word, else the type's)."""
    seen = {}
    for name, position in positions.items():
        kind, place, held = things.get(name, ("", "", False))
        kind = kind or labels.get(name, "")
        size = sizes.get(name, (0.0, 0.0, 0.0))
        seen[name] = Seen((float(position[0]), float(position[1]), float(position[2])),
                          (float(size[0]), float(size[1]), float(size[2])), kind, color_of(name, kind, colors, type_colors),
                          place, held)
    return environment(seen)


class RemoteTaskMemory:
    """The memory node's task memory. ``environment()`` gives the world for a begin or a log that is given none."""

    def __init__(self, node: Node, config: TaskMemoryConfig, call: Call, environment: Callable[[], Environment] | None = None,
                 timeout: float = 30.0) -> None:
        self.config, self.call, self.timeout = config, call, timeout
        self.environment = environment or dict
        self.begin_client = node.create_client(BeginTask, BEGIN_SERVICE)
        self.log_client = node.create_client(LogTaskAction, LOG_SERVICE)
        self.query_client = node.create_client(QueryTaskMemory, QUERY_SERVICE)

    def ready(self) -> bool:
        return all(c.service_is_ready() for c in (self.begin_client, self.log_client, self.query_client))

    def _ask(self, client: Any, request: Any, what: str) -> Any:
        """One call; MemoryUnavailable when the service is missing or silent, ValueError when it refuses."""
        if not client.service_is_ready():
            raise MemoryUnavailable(f"the memory service {what} is not running")
        try:
            reply = self.call(client, request, self.timeout, what)
        except TimeoutError as exc:
            raise MemoryUnavailable(str(exc)) from None
        if not reply.success:
            raise ValueError(reply.message)
        return reply

    def begin(self, task: str, instruction: str = "", environment: Environment | None = None) -> WorkingMemory:
        world = environment if environment is not None else self.environment()
        reply = self._ask(self.begin_client, BeginTask.Request(task=task, instruction=instruction,
                                                               environment=environment_to_msgs(world)), BEGIN_SERVICE)
        return working_from_json(reply.working_memory)

    def log_action(self, function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], result: str, ok: bool,
                   environment: Environment | None = None) -> str:
        world = environment if environment is not None else self.environment()
        args_json, kwargs_json = arguments_to_json(args, kwargs)
        request = LogTaskAction.Request(function=function, args=args_json, kwargs=kwargs_json, result=result, ok=ok,
                                        environment=environment_to_msgs(world))
        return str(self._ask(self.log_client, request, LOG_SERVICE).task)

    def _query(self, query: str, task: str = "", limit: int = 0) -> Any:
        reply = self._ask(self.query_client, QueryTaskMemory.Request(query=query, task=task, limit=limit), QUERY_SERVICE)
        return json.loads(reply.result)

    def working(self, task: str) -> WorkingMemory:
        reply = self._ask(self.query_client, QueryTaskMemory.Request(query=QueryTaskMemory.Request.QUERY_WORKING, task=task),
                          QUERY_SERVICE)
        return working_from_json(reply.result)

    def declarative(self, task: str, limit: int = 0) -> list[dict[str, Any]]:
        return list(self._query(QueryTaskMemory.Request.QUERY_DECLARATIVE, task, limit))

    def recall(self, task: str, limit: int = 0) -> dict[str, Any]:
        """The task's declarative memory as the console's ``retrieve_declarative_memory`` answers it."""
        return dict(self._query(QUERY_RECALL, task, limit))

    def tasks(self) -> list[dict[str, Any]]:
        return list(self._query(QueryTaskMemory.Request.QUERY_TASKS))


class FallbackTaskMemory:
    """``remote`` first; while it is unavailable a local TaskMemory from ``local()``, made anew each time the
    remote goes away (it then reads what the memory node wrote). The world is computed here once per call
    (``settled()`` after an action: perception caught up with it) and sent to whichever answers."""

    def __init__(self, remote: RemoteTaskMemory, local: Callable[[], TaskMemory], environment: Callable[[], Environment],
                 log: Callable[[str], None], settled: Callable[[], Environment] | None = None) -> None:
        self.remote, self.local, self.log = remote, local, log
        self.environment, self.settled = environment, settled or environment
        self.config = remote.config
        self._local: TaskMemory | None = None

    @property
    def using_local(self) -> bool:
        return self._local is not None

    def _use(self, method: str, *args: Any) -> Any:
        try:
            out = getattr(self.remote, method)(*args)
        except MemoryUnavailable as exc:
            if self._local is None:
                self._local = self.local()
                self.log(f"{exc}; the task memory runs in this process instead ({self._local.store.directory})")
            return getattr(self._local, method)(*args)
        if self._local is not None:
            self.log("the memory node's task memory answers again; using it")
            self._local = None
        return out

    def begin(self, task: str, instruction: str = "", environment: Environment | None = None) -> WorkingMemory:
        return self._use("begin", task, instruction, environment if environment is not None else self.environment())

    def log_action(self, function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], result: str, ok: bool,
                   environment: Environment | None = None) -> str:
        world = environment if environment is not None else self.settled()
        return self._use("log_action", function, args, kwargs, result, ok, world)

    def working(self, task: str) -> WorkingMemory:
        return self._use("working", task)

    def declarative(self, task: str, limit: int = 0) -> list[dict[str, Any]]:
        return self._use("declarative", task, limit)

    def recall(self, task: str, limit: int = 0) -> dict[str, Any]:
        """The task's declarative memory (extracted state and newest actions), remote or local."""
        return self._use("recall", task, limit)

    def tasks(self) -> list[dict[str, Any]]:
        return self._use("tasks")
