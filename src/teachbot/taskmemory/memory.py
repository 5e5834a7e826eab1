"""Task memory for the console: the coordinator's functions over the logs, and the logging of actions.

:class:`TaskMemory` is what the memory node serves (or what a process without ROS runs in itself): begin
or resume a task, log an action with the world after it, and answer the working and the declarative
memory of a task. :class:`ConsoleTaskMemory` is the console's side: the robot functions
``begin_task(task)``, ``current_tasks()``, ``retrieve_working_memory(task)`` and
``retrieve_declarative_memory(task)`` (the environment and task state extracted from the task's log, with its
newest actions: teachbot.taskmemory.declarative), and a wrapper that logs every acting robot function
(``task_memory.logged_functions``) with its result under the task the robot works on now.
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from teachbot.language.dialog import SessionEnded
from teachbot.taskmemory.log import BEGIN, RESUMED, LogRecord, TaskLogStore, slug
from teachbot.taskmemory.specs import ObjectInfo, TaskMemoryConfig, TaskSpec
from teachbot.taskmemory.working import ACTIVE, DONE, LogExtractor, TaskRun, WorkingMemory, declarative_view

MEMORY_FUNCTIONS = ("begin_task", "current_tasks", "retrieve_working_memory", "retrieve_declarative_memory")


class TaskMemory:
    """The declarative and working memory of one robot over a :class:`TaskLogStore`.

    ``environment()`` says what is where now (perception, or the simulator in an evaluation); ``worker``
    selects a task's objects when it begins and makes its working memories (a :class:`WorkerLLM` or a
    :class:`LogExtractor`; the extractor by default). Whether a task is done, so whether ``begin`` resumes it,
    is the worker's judgement too: the extractor is asked only when it is the worker.
    """

    def __init__(self, store: TaskLogStore | str | Path, config: TaskMemoryConfig, profile: str,
                 environment: Callable[[], Mapping[str, ObjectInfo]], worker: Callable[[TaskRun], WorkingMemory] | None = None) -> None:
        self.store = store if isinstance(store, TaskLogStore) else TaskLogStore(store)
        self.config, self.profile, self.environment = config, profile, environment
        self.specs: Mapping[str, TaskSpec] = config.tasks(profile)
        self.extractor = LogExtractor(config)
        self.worker = worker or self.extractor
        self._current = ""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ names
    def resolve(self, task: str, known_only: bool = False) -> str:
        """The task's canonical name: a specified task by its name (forgiving case, spaces, a suffix such
        as 'sorting' for 'sort', a small typo) or a task with a log; else ``task`` itself as a new one."""
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"name a task, e.g. one of {self.names()}")
        wanted = slug(task)
        names = {slug(n): n for n in [*self.specs, *self.store.tasks()]}
        if wanted in names:
            return names[wanted]
        near = [n for s, n in names.items() if wanted.startswith(s) or s.startswith(wanted)]
        near = near or [names[s] for s in difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.8)]
        if len(near) == 1:
            return near[0]
        if known_only:
            raise ValueError(f"no task is called {task!r}. Use one of current_tasks() or of the specified tasks {self.names()}")
        return task.strip()

    def names(self) -> list[str]:
        return list(dict.fromkeys([*self.specs, *self.store.tasks()]))

    # ------------------------------------------------------------------ acting
    def current(self) -> str:
        """The task the robot works on now (the last one begun, also after a restart)."""
        with self._lock:
            if not self._current:
                self._current = self.store.current()
            return self._current

    def begin(self, task: str, instruction: str = "", environment: Mapping[str, ObjectInfo] | None = None) -> WorkingMemory:
        """Begin ``task``, or resume it when its last run is unfinished; its working memory. ``environment``:
        the world now (default: ask ``self.environment``)."""
        name = self.resolve(task)
        env = dict(environment if environment is not None else self.environment())
        run = self.run(name)
        memory = self.worker(run) if run.records else None
        if memory is not None and memory.status != DONE:
            self.store.begin(name, RESUMED + (instruction or run.instruction), run.relevant, env)
            with self._lock:
                self._current = name
            return dataclasses.replace(memory, status=ACTIVE)
        relevant = self._select(name, instruction, env)
        self.store.begin(name, instruction, relevant, env)
        with self._lock:
            self._current = name
        return self.working(name)

    def _select(self, name: str, instruction: str, env: Mapping[str, ObjectInfo]) -> tuple[str, ...]:
        """The objects of the task ``name`` among ``env``, as the worker selects them."""
        select = getattr(self.worker, "select", self.extractor.select)
        return tuple(select(name, self.specs.get(name), instruction, env))

    def log_action(self, function: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], result: str, ok: bool,
                   environment: Mapping[str, ObjectInfo] | None = None) -> str:
        """Log a robot call under the current task with the world after it; returns the task ('' when no
        task has begun: nothing is logged)."""
        task = self.current()
        if task:
            env = environment if environment is not None else self.environment()
            self.store.action(task, function, args, kwargs, result, ok, dict(env))
        return task

    # ------------------------------------------------------------------ remembering
    def run(self, name: str) -> TaskRun:
        """The run of the task called ``name`` (a canonical name: every caller has resolved it already)."""
        return TaskRun(name, self.specs.get(name), self.store.since_begin(name, first=True), name == self.current())

    def working(self, task: str) -> WorkingMemory:
        """The working memory of ``task``; for a task with no log yet, 'not started': its objects selected
        in the world now and its state with nothing done (a step the world already shows done stays so)."""
        return self.worker(self._known_run(task))

    def _known_run(self, task: str) -> TaskRun:
        """The run of a known task; for one with no log yet, a run of one begin record that is not logged:
        its objects selected in the world now."""
        name = self.resolve(task, known_only=True)
        run = self.run(name)
        if not run.records:
            env = dict(self.environment())
            begun = LogRecord(BEGIN, name, time.time(), relevant=self._select(name, "", env), environment=env)
            run = TaskRun(name, run.spec, [begun], False, started=False)
        return run

    def declarative(self, task: str, limit: int = 0) -> list[dict[str, Any]]:
        """The task's newest logged actions as the log holds them (the call, its result, where its objects were
        after it): the raw rows, for the memory CLI and the node's ``declarative`` query."""
        name = self.resolve(task, known_only=True)
        run = self.run(name)
        return declarative_view(run.records, run.relevant, limit or self.config.declarative_limit)

    def recall(self, task: str, limit: int = 0) -> dict[str, Any]:
        """The task's declarative memory as ``retrieve_declarative_memory(task)`` answers it: the environment
        state and the task state the worker extracts from the task's log (the paper's Prompt 5; the extractor's
        reading when it is the worker), with the newest ``limit`` actions (default ``declarative_limit``)."""
        extract = getattr(self.worker, "declarative", self.extractor.declarative)
        return extract(self._known_run(task), limit or self.config.declarative_limit).to_console()

    def tasks(self) -> list[dict[str, Any]]:
        """Every task with a log, oldest first: name, status, progress, what the person asked."""
        out = []
        for name in self.store.tasks():
            memory = self.worker(self.run(name))
            out.append({"task": name, "status": memory.status, "progress": memory.task_state, "instruction": memory.instruction})
        return out


class ConsoleTaskMemory:
    """The console's task-memory functions over a :class:`TaskMemory` (in-process) or anything with its
    methods (the memory node's client)."""

    def __init__(self, memory: Any, logged: tuple[str, ...] | None = None) -> None:
        self.memory = memory
        self.logged = tuple(logged if logged is not None else memory.config.logged_functions)
        self.last_words = ""
        # the task begun in this conversation: acting calls are logged only under it, so what the robot does for
        # a request that is no task (or after a restart, before a task is begun again) never lands in a task's log
        self.active = ""

    def functions(self) -> dict[str, Callable[..., Any]]:
        def begin_task(task: str) -> dict:
            memory = self.memory.begin(task, self.last_words)
            self.active = memory.task
            return memory.to_console()

        def current_tasks() -> list:
            return self.memory.tasks()

        def retrieve_working_memory(task: str) -> dict:
            return self.memory.working(task).to_console()

        def retrieve_declarative_memory(task: str) -> dict:
            return self.memory.recall(task)

        return {f.__name__: f for f in (begin_task, current_tasks, retrieve_working_memory, retrieve_declarative_memory)}

    def wrap(self, functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
        """``functions`` plus the memory functions, the acting ones logged and the person's words noted."""
        out = dict(functions)
        for name in self.logged:
            if name in out:
                out[name] = self._logged(name, out[name])
        for name in ("wait_for_trigger", "ask"):
            if name in out:
                out[name] = self._listening(out[name])
        out.update(self.functions())
        return out

    def _logged(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = function(*args, **kwargs)
            except Exception as exc:
                if self.active:
                    self.memory.log_action(name, args, kwargs, f"{type(exc).__name__}: {exc}", False)
                raise
            if self.active:
                self.memory.log_action(name, args, kwargs, repr(result) if result is not None else "", True)
            return result

        call.__name__ = name
        return call

    def _listening(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                reply = function(*args, **kwargs)
            except SessionEnded:  # the conversation is over: the next one begins its task again
                self.active = ""
                raise
            if isinstance(reply, Mapping) and isinstance(reply.get("text"), str):
                self.last_words = reply["text"]
            return reply

        call.__name__ = getattr(function, "__name__", "listen")
        return call


def without_memory(functions: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``functions`` without the task-memory ones (the ablation without memory)."""
    return {k: v for k, v in functions.items() if k not in MEMORY_FUNCTIONS}
