"""The task memory over ROS (teachbot.taskmemory): the memory node's services and what both ends share.

The memory node attaches :class:`TaskMemoryService`, which serves

- ``memory/begin_task`` (BeginTask): begin a task or resume its unfinished run; its working memory;
- ``memory/log_task_action`` (LogTaskAction): log a robot call under the current task, with the world after it;
- ``memory/query_task_memory`` (QueryTaskMemory): the tasks begun, or a task's working or declarative memory
  (``declarative``: the logged rows; ``recall``: the state extracted from them, as the console's
  ``retrieve_declarative_memory`` answers).

The world comes with each begin and log request (``TaskObject[]``: the interaction manager computes it from
perception). The node keeps the newest one it was told (after a restart: the newest one logged) for requests
that send none and for the working memory of a task not begun yet. Requests run one at a time, in the order
they came, on a worker thread: a worker LLM (``task_memory.working_memory: worker``) takes seconds and must
not hold up the node's other services. A bad request gets ``success: false`` and a message saying what to
do, never an exception in the executor. The logs are durable when a log request has been answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rclpy.node import Node
from teachbot_interfaces.msg import TaskObject
from teachbot_interfaces.srv import BeginTask, LogTaskAction, QueryTaskMemory

from teachbot.errors import TeachbotError
from teachbot.language.prompts import load_prompt
from teachbot.llm.factory import model_from_config
from teachbot.nodes.common import wait_for_worker
from teachbot.nodes.nodeset import llm_settings
from teachbot.taskmemory import ObjectInfo, TaskLogStore, TaskMemory, TaskMemoryConfig, WorkerLLM, WorkingMemory
from teachbot.taskmemory.working import dumps

BEGIN_SERVICE = "memory/begin_task"
LOG_SERVICE = "memory/log_task_action"
QUERY_SERVICE = "memory/query_task_memory"
QUERY_RECALL = "recall"  # the declarative memory as retrieve_declarative_memory answers it (extracted state)
QUERIES = (QueryTaskMemory.Request.QUERY_TASKS, QueryTaskMemory.Request.QUERY_WORKING,
           QueryTaskMemory.Request.QUERY_DECLARATIVE, QUERY_RECALL)
WORKER_ROLE = "task_memory_worker"  # the LLM role of config/llm.yaml behind working_memory: worker

Environment = dict[str, ObjectInfo]


# ------------------------------------------------------------------------------------------- conversions
def environment_to_msgs(environment: Mapping[str, ObjectInfo] | None) -> list[TaskObject]:
    """The world as ``TaskObject`` messages (None: an empty list, i.e. "the world you were told last")."""
    return [TaskObject(name=n, type=i.type, color=i.color, at=i.at) for n, i in (environment or {}).items()]


def environment_from_msgs(msgs: Sequence[TaskObject]) -> Environment:
    """The world a request sent; ValueError naming the object when a name is missing or given twice."""
    out: Environment = {}
    for index, msg in enumerate(msgs):
        name = msg.name.strip()
        if not name:
            raise ValueError(f"environment[{index}] has no name; every TaskObject needs the object's name")
        if name in out:
            raise ValueError(f"environment names {name!r} twice; send each object once")
        out[name] = ObjectInfo(msg.type, msg.color, msg.at)
    return out


def working_from_json(text: str) -> WorkingMemory:
    """A working memory from its service form (:func:`teachbot.taskmemory.working.dumps`)."""
    data = json.loads(text)
    return WorkingMemory(
        str(data["task"]), str(data["status"]), str(data.get("instruction", "")), tuple(data.get("task_reminders", ())),
        str(data.get("task_state", "")), tuple(data.get("done", ())), tuple(data.get("remaining", ())),
        {str(k): str(v) for k, v in (data.get("task_relevant_objects") or {}).items()}, str(data.get("source", "extractor")),
    )


def arguments_from_json(args: str, kwargs: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A logged call's arguments from LogTaskAction's fields ('' = none); ValueError saying the expected form."""
    try:
        positional = json.loads(args) if args.strip() else []
    except json.JSONDecodeError as exc:
        raise ValueError(f"args is not JSON ({exc.msg}): send a JSON list such as '[\"box 1\"]'") from None
    try:
        keywords = json.loads(kwargs) if kwargs.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"kwargs is not JSON ({exc.msg}): send a JSON object such as '{{\"speed\": 0.5}}'") from None
    if not isinstance(positional, list):
        raise ValueError(f"args must be a JSON list of the positional arguments, got {type(positional).__name__}")
    if not isinstance(keywords, dict):
        raise ValueError(f"kwargs must be a JSON object of the keyword arguments, got {type(keywords).__name__}")
    return tuple(positional), keywords


def arguments_to_json(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """LogTaskAction's args and kwargs fields (a value JSON cannot hold travels as its repr, as the log keeps it)."""
    return json.dumps(list(args), default=repr), json.dumps(dict(kwargs), default=repr)


# ------------------------------------------------------------------------------------------- set-up
def working_memory_maker(config: TaskMemoryConfig, log: Callable[[str], None], llm: dict[str, Any] | None = None) -> Any:
    """What makes working memories, as config says: None (the extractor) or a WorkerLLM over the
    ``task_memory_worker`` role of ``llm`` (default: config/llm.yaml) with prompts/task_memory_worker.txt."""
    if config.working_memory != "worker":
        return None

    model = model_from_config(llm if llm is not None else llm_settings(), WORKER_ROLE)
    return WorkerLLM(model, load_prompt("task_memory_worker.txt"), config, log)


def newest_world(store: TaskLogStore) -> Environment:
    """The world of the newest record of any task ({} when nothing is logged): what a restarted node knows."""
    newest = None
    for task in store.tasks():
        records = store.records(task)
        if records and (newest is None or records[-1].time > newest.time):
            newest = records[-1]
    return dict(newest.environment) if newest is not None else {}


# ------------------------------------------------------------------------------------------- the service
class TaskMemoryService:
    """Serves a :class:`TaskMemory` on ``directory`` (or a ready TaskLogStore: the postgres backend's) for ``node``
    (see the module docstring)."""

    def __init__(self, node: Node, directory: str | Path | TaskLogStore, config: TaskMemoryConfig | None = None,
                 profile: str = "household", worker: Any = None, callback_group: Any = None) -> None:
        self.node = node
        self.config = config or TaskMemoryConfig.load()
        store = directory if isinstance(directory, TaskLogStore) else TaskLogStore(directory)
        self._world_lock = threading.Lock()
        self._world: Environment = newest_world(store)
        self.memory = TaskMemory(store, self.config, profile, self.world, worker)
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="task_memory")  # one: requests in order
        self.services = [
            node.create_service(BeginTask, BEGIN_SERVICE, self.on_begin, callback_group=callback_group),
            node.create_service(LogTaskAction, LOG_SERVICE, self.on_log, callback_group=callback_group),
            node.create_service(QueryTaskMemory, QUERY_SERVICE, self.on_query, callback_group=callback_group),
        ]

    @property
    def directory(self) -> Path:
        return self.memory.store.directory

    def world(self) -> Environment:
        """The newest world this node was told (the TaskMemory's environment source)."""
        with self._world_lock:
            return dict(self._world)

    def _told(self, msgs: Sequence[TaskObject]) -> Environment | None:
        """The request's world, kept as the newest one; None when it sent none (the newest one is used)."""
        if not msgs:
            return None
        world = environment_from_msgs(msgs)
        with self._world_lock:
            self._world = world
        return dict(world)

    # -------------------------------------------------------------- callbacks: the work on the worker thread
    async def on_begin(self, request: BeginTask.Request, response: BeginTask.Response) -> BeginTask.Response:
        return await self._run(self.begin, request, response, BEGIN_SERVICE)

    async def on_log(self, request: LogTaskAction.Request, response: LogTaskAction.Response) -> LogTaskAction.Response:
        return await self._run(self.log, request, response, LOG_SERVICE)

    async def on_query(self, request: QueryTaskMemory.Request, response: QueryTaskMemory.Response) -> QueryTaskMemory.Response:
        return await self._run(self.query, request, response, QUERY_SERVICE)

    async def _run(self, answer: Callable[[Any, Any], Any], request: Any, response: Any, service: str) -> Any:
        try:
            return await wait_for_worker(self.node, self._workers.submit(self.answer, answer, request, response, service))
        except RuntimeError as exc:  # the pool was shut down (the node is closing)
            response.success, response.message = False, f"{service}: the memory node is shutting down ({exc})"
            return response

    def answer(self, answer: Callable[[Any, Any], Any], request: Any, response: Any, service: str) -> Any:
        """``answer(request, response)``, any error turned into ``success: false`` and its message."""
        try:
            answer(request, response)
            response.success = True
        except (ValueError, TypeError, KeyError) as exc:  # the request's fault: the message says what to do
            text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            response.success, response.message = False, str(text)
        except (TeachbotError, OSError) as exc:
            response.success, response.message = False, f"the task memory in {self.directory} failed: {exc}"
            self.node.get_logger().error(f"{service}: {response.message}")
        except Exception as exc:  # noqa: BLE001 - a bug must not take the memory node's executor down
            response.success, response.message = False, f"{service} failed: {type(exc).__name__}: {exc}"
            self.node.get_logger().error(response.message)
        if not response.success:
            self.node.get_logger().warning(f"{service}: {response.message}")
        return response

    # -------------------------------------------------------------- the answers (plain calls; tests use them too)
    def begin(self, request: BeginTask.Request, response: BeginTask.Response) -> None:
        memory = self.memory.begin(request.task, request.instruction, self._told(request.environment))
        response.task, response.working_memory = memory.task, dumps(memory)
        response.message = f"{memory.task}: {memory.status}; {memory.task_state}"

    def log(self, request: LogTaskAction.Request, response: LogTaskAction.Response) -> None:
        function = request.function.strip()
        if not function:
            raise ValueError("function is empty; name the robot function that was called, e.g. 'grasp'")
        args, kwargs = arguments_from_json(request.args, request.kwargs)
        environment = self._told(request.environment)
        response.task = self.memory.log_action(function, args, kwargs, request.result, bool(request.ok), environment)
        response.message = (f"logged under {response.task}" if response.task else
                            "nothing logged: no task has begun; call begin_task(name) first")

    def query(self, request: QueryTaskMemory.Request, response: QueryTaskMemory.Response) -> None:
        query = request.query.strip().lower()
        if query == QueryTaskMemory.Request.QUERY_TASKS:
            tasks = self.memory.tasks()
            response.result = json.dumps(tasks)
            response.message = f"{len(tasks)} task{'s' if len(tasks) != 1 else ''} begun"
            return
        if query not in QUERIES:
            raise ValueError(f"unknown query {request.query!r}; ask one of {', '.join(QUERIES)}")
        response.task = self.memory.resolve(request.task, known_only=True)
        if query == QueryTaskMemory.Request.QUERY_WORKING:
            memory = self.memory.working(response.task)
            response.result, response.message = dumps(memory), f"{memory.task}: {memory.status}; {memory.task_state}"
        elif query == QUERY_RECALL:
            recalled = self.memory.recall(response.task, int(request.limit))
            response.result = json.dumps(recalled, default=repr)
            response.message = f"{response.task}: declarative memory from {recalled['source']}"
        else:
            actions = self.memory.declarative(response.task, int(request.limit))
            response.result = json.dumps(actions, default=repr)
            response.message = f"{len(actions)} action{'s' if len(actions) != 1 else ''} of {response.task}"

    def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)
        close_store = getattr(self.memory.store, "close", None)  # the postgres backend's connection
        if close_store is not None:
            close_store()
