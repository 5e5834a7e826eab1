"""ROS 2 node ``memory``: episodic interaction examples, embedding retrieval, persistence; the knowledge base.

Services memory/retrieve, memory/add, memory/list, memory/remove; topic memory/updated (MemoryUpdate,
transient local) announces every change: this node's, and on the postgres backend also the lessons other robots
add or remove (one IMPORTED for a large batch, e.g. a catch-up after an outage). The store lives in the
directories of config/memory.yaml, or in the fleet's database.

The distilled knowledge base (DROC, teachbot.knowledge): memory/add_knowledge (AddKnowledge: all entries
of a request or none) and memory/retrieve_knowledge (RetrieveKnowledge: the entries for a task, with the
'What I know' block), a KNOWLEDGE_ADDED update after each add. Retrieval shares the examples' sentence
embedder; the image embedder is config/knowledge.yaml's (knowledge.image_model), so a vector from
perception/describe_object compares with the entries' vectors. The knowledge directory is
memory.store.knowledge_dir of config/memory.yaml, or "knowledge" next to the learned examples when the
node is given its store (``memory``) or another learned_dir, so a temporary store never writes into the
user's knowledge base; the ``knowledge_dir`` parameter overrides both. On the postgres backend the knowledge
base is in the fleet's database (teachbot.knowledge.pg_store) unless the ``knowledge_dir`` parameter is given,
and the task logs are copied into it (teachbot.taskmemory.pg_log) unless ``tasks_dir`` is. With knowledge.select.enabled the
candidates go through DROC's LLM selection (the ``knowledge_select`` role of config/llm.yaml).

The task memory (teachbot.taskmemory, config/task_memory.yaml; teachbot.nodes.task_memory_service):
memory/begin_task (BeginTask), memory/log_task_action (LogTaskAction) and memory/query_task_memory
(QueryTaskMemory) over the per-task logs in memory.store.tasks_dir of config/memory.yaml, or "tasks" next to
a store given to the node, as the knowledge; the ``tasks_dir`` parameter overrides both. Not served when
task_memory.enabled is false.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builtin_interfaces.msg import Time
from rclpy.node import Node
from teachbot_interfaces.msg import InteractionExample as ExampleMsg
from teachbot_interfaces.msg import MemoryUpdate
from teachbot_interfaces.srv import AddExample, AddKnowledge, ListExamples, RemoveExample, RetrieveExamples, RetrieveKnowledge

from teachbot.errors import TeachbotError
from teachbot.knowledge.entry import KINDS, KnowledgeError
from teachbot.knowledge.object_crop import knowledge_settings
from teachbot.knowledge.retriever import KnowledgeRetriever, render
from teachbot.knowledge.store import KnowledgeStore
from teachbot.llm.factory import model_from_config
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.memory.example import InteractionExample
from teachbot.nodes.common import LATCHED_QOS, refuse_duplicate, run_nodes, traced
from teachbot.nodes.knowledge_convert import entries_from_msgs, entry_to_msg
from teachbot.nodes.nodeset import llm_settings
from teachbot.nodes.task_memory_service import TaskMemoryService, working_memory_maker
from teachbot.stores.backend import forward_logs, open_knowledge, open_memory, open_task_logs
from teachbot.taskmemory import TaskMemoryConfig
from teachbot.taskmemory.log import TaskLogStore

if TYPE_CHECKING:  # psycopg is imported only on the postgres backend
    from teachbot.memory.pg_store import StoreChange

BLOCK_PREFIX = "# "  # the 'What I know' block goes into a Python console prompt: comment lines
MANY_CHANGES = 50  # others' changes caught up at once beyond this are one IMPORTED update, not one each


def to_msg(example: InteractionExample) -> ExampleMsg:
    msg = ExampleMsg(
        id=example.id, profile=example.profile, source=example.source, transcript=example.transcript,
        instructions=list(example.instructions), problem=example.problem, improvement=example.improvement,
        scope=example.scope, episode_id=example.episode_id, author_model=example.author_model,
        embedding_model=example.embedding_model,
    )
    if example.created:
        try:
            stamp = datetime.fromisoformat(example.created).timestamp()
            msg.created = Time(sec=int(stamp), nanosec=int((stamp % 1) * 1e9))
        except ValueError:
            pass
    return msg


def from_msg(msg: ExampleMsg) -> InteractionExample:
    created = ""
    if msg.created.sec:
        created = datetime.fromtimestamp(msg.created.sec + msg.created.nanosec * 1e-9, UTC).isoformat()
    return InteractionExample(
        id=msg.id, profile=msg.profile, source=msg.source or "learned", transcript=msg.transcript,
        instructions=tuple(msg.instructions), problem=msg.problem, improvement=msg.improvement, scope=msg.scope,
        episode_id=msg.episode_id, author_model=msg.author_model, embedding_model=msg.embedding_model, created=created,
    ).with_derived_instructions()


class MemoryNode(Node):
    """Wraps an :class:`EpisodicMemory`; every service answers with a message, never a crash."""

    def __init__(self, memory: EpisodicMemory | None = None, config: str = "", learned_dir: str = "", knowledge_dir: str = "",
                 knowledge_config: str = "", knowledge: KnowledgeRetriever | None = None, tasks_dir: str = "",
                 task_memory_config: str = "", task_profile: str = "household") -> None:
        """``config``: a memory.yaml (default config/memory.yaml); ``learned_dir`` overrides its store.learned_dir,
        ``knowledge_dir`` its store.knowledge_dir, ``tasks_dir`` its store.tasks_dir; ``knowledge_config``: a
        knowledge.yaml (default config/knowledge.yaml); ``knowledge``: a ready retriever (its store and embedders)
        instead; ``task_memory_config``: a task_memory.yaml (default config/task_memory.yaml) and ``task_profile``
        the robot API profile whose task specifications it serves."""
        super().__init__("memory")
        self.declare_parameter("config", config)
        self.declare_parameter("learned_dir", learned_dir)
        self.declare_parameter("knowledge_dir", knowledge_dir)
        self.declare_parameter("knowledge_config", knowledge_config)
        self.declare_parameter("tasks_dir", tasks_dir)
        self.declare_parameter("task_memory_config", task_memory_config)
        self.declare_parameter("task_profile", task_profile)
        refuse_duplicate(self)
        self._unforward_logs = forward_logs(self.get_logger())  # the store's lines (a database outage) in this node's log
        # (an empty EpisodicMemory is falsy: a given store must never be swapped for the configured one)
        # memory.store.backend: the file store or a fleet's PostgreSQL database (teachbot.stores.backend)
        self.memory = memory if memory is not None else open_memory(self._config())
        self.memory.sync()
        # load the embedding model now: on the first query it would block this node's executor for seconds
        self.memory.warm_up()
        self.knowledge = knowledge if knowledge is not None else self._knowledge()
        self.updates = self.create_publisher(MemoryUpdate, "memory/updated", LATCHED_QOS)
        if hasattr(self.memory.store, "on_change"):  # the postgres backend hears other robots' lessons
            self.memory.store.on_change = self._on_others_change
        self.create_service(RetrieveExamples, "memory/retrieve",
                            traced(self, "memory.retrieve", self._guarded("memory/retrieve", self.on_retrieve), _retrieved))
        self.create_service(AddExample, "memory/add", traced(self, "memory.add", self._guarded("memory/add", self.on_add), _added))
        self.create_service(ListExamples, "memory/list", self._guarded("memory/list", self.on_list))
        self.create_service(RemoveExample, "memory/remove", self._guarded("memory/remove", self.on_remove))
        self.create_service(AddKnowledge, "memory/add_knowledge",
                            traced(self, "knowledge.add", self._guarded("memory/add_knowledge", self.on_add_knowledge), _added))
        self.create_service(RetrieveKnowledge, "memory/retrieve_knowledge",
                            traced(self, "knowledge.retrieve", self._guarded("memory/retrieve_knowledge", self.on_retrieve_knowledge),
                                   _knowledge_retrieved))
        self.tasks = self._task_memory()
        tasks = f"; task logs in {self.tasks.directory}" if self.tasks is not None else "; task memory off"
        self.get_logger().info(f"memory ready: {len(self.memory)} examples, {len(self.knowledge.store)} knowledge entries "
                               f"in {self.knowledge.store.directory}{tasks}")

    def _config(self) -> MemoryConfig:
        settings = MemoryConfig.load(str(self.get_parameter("config").value) or None)
        learned = str(self.get_parameter("learned_dir").value)
        if learned:  # a store elsewhere: its knowledge and task logs next to it unless knowledge_dir/tasks_dir say otherwise
            path = Path(learned).expanduser().resolve()
            settings = dataclasses.replace(settings, learned_dir=path, knowledge_dir=path.parent / "knowledge",
                                           tasks_dir=path.parent / "tasks")
        return settings

    def _store_dir(self, parameter: str, configured: Path, name: str) -> Path:
        """The directory the ``parameter`` names, else the configured one, else ``name`` next to a store given to
        this node (a temporary store never writes into the user's)."""
        explicit = str(self.get_parameter(parameter).value)
        if explicit:
            return Path(explicit).expanduser().resolve()
        learned = Path(self.memory.store.learned_dir).resolve()  # the postgres backend's local directory is its spool
        config = self._config()
        own = config.spool_path if config.backend == "postgres" else config.learned_dir
        return configured if learned == own.resolve() else learned.parent / name

    def _knowledge(self) -> KnowledgeRetriever:
        """The knowledge base and its retriever (see the module docstring for where it lives)."""
        directory = self._store_dir("knowledge_dir", self._config().knowledge_path, "knowledge")
        settings, image_embedder = knowledge_settings(str(self.get_parameter("knowledge_config").value) or None)
        select = None
        if settings.select_enabled:  # DROC's LLM selection among the candidates: the knowledge_select role

            select = model_from_config(llm_settings(), "knowledge_select")
        # on the postgres backend the fleet's database, unless the knowledge_dir parameter names a directory
        store = KnowledgeStore(directory) if self.get_parameter("knowledge_dir").value else open_knowledge(self._config(), directory)
        return KnowledgeRetriever(store, self.memory.embedder, image_embedder, settings, select_model=select)

    def _task_memory(self) -> TaskMemoryService | None:
        """The task memory's services (config/task_memory.yaml), or None when it is switched off."""

        config = TaskMemoryConfig.load(str(self.get_parameter("task_memory_config").value) or None)
        if not config.enabled:
            return None
        directory = self._store_dir("tasks_dir", self._config().tasks_path, "tasks")
        worker = working_memory_maker(config, self.get_logger().warning)
        # on the postgres backend copied into the fleet's database, unless the tasks_dir parameter names a directory
        store = TaskLogStore(directory) if self.get_parameter("tasks_dir").value else open_task_logs(self._config(), directory)
        return TaskMemoryService(self, store, config, str(self.get_parameter("task_profile").value), worker)

    def close(self) -> None:
        self._unforward_logs()
        if hasattr(self.memory.store, "on_change"):
            self.memory.store.on_change = None  # nothing is published once the node is going
        if self.tasks is not None:
            self.tasks.close()
        for store in (self.memory.store, self.knowledge.store):  # the postgres backend's listener and connections
            close_store = getattr(store, "close", None)
            if close_store is not None:
                close_store()

    def _guarded(self, service: str, handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        """``handler`` that answers every request: an exception it did not expect (a database error, a bug) is an error
        line of this node's log and a reply that says it failed (``success`` False where the reply has one, else an
        empty one), never the end of the node."""

        def answer(request: Any, response: Any) -> Any:
            try:
                return handler(request, response)
            except Exception as exc:  # noqa: BLE001 - one request failed; the memory goes on serving the others
                self.get_logger().error(f"{service} failed: {type(exc).__name__}: {exc}")
                if hasattr(response, "success"):
                    response.success, response.message = False, f"{service} failed: {exc}"
                return response

        return answer

    def _announce(self, action: int, example_id: str) -> None:
        size = len(self.knowledge.store) if action == MemoryUpdate.KNOWLEDGE_ADDED else len(self.memory)
        self.updates.publish(MemoryUpdate(action=action, example_id=example_id, size=size))

    def _on_others_change(self, change: StoreChange) -> None:
        """Other robots' (or processes') lessons reached this memory: announce them as this node's own changes are."""
        if len(change.added) + len(change.removed) > MANY_CHANGES:
            self._announce(MemoryUpdate.IMPORTED, "")
            return
        for example_id in change.added:
            self._announce(MemoryUpdate.ADDED, example_id)
        for example_id in change.removed:
            self._announce(MemoryUpdate.REMOVED, example_id)

    def on_retrieve(self, request: RetrieveExamples.Request, response: RetrieveExamples.Response) -> RetrieveExamples.Response:
        found = self.memory.retrieve(list(request.instructions), request.profile, int(request.k) or None)
        response.examples = [to_msg(r.example) for r in found]
        response.scores = [float(r.score) for r in found]
        return response

    def on_add(self, request: AddExample.Request, response: AddExample.Response) -> AddExample.Response:
        try:
            response.id = self.memory.add(from_msg(request.example), confirmed=bool(request.confirmed))
        except TeachbotError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.message = True, f"stored as {response.id}"
        self._announce(MemoryUpdate.ADDED, response.id)
        return response

    def on_list(self, request: ListExamples.Request, response: ListExamples.Response) -> ListExamples.Response:
        self.memory.sync()
        try:
            response.examples = [to_msg(e) for e in self.memory.store.list(request.profile, request.source)]
        except TeachbotError as exc:  # e.g. an unknown source filter: answer with nothing, log why
            self.get_logger().warning(f"memory/list: {exc}")
        return response

    def on_remove(self, request: RemoveExample.Request, response: RemoveExample.Response) -> RemoveExample.Response:
        try:
            self.memory.remove(request.id)
        except (TeachbotError, KeyError) as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success, response.message = True, f"removed {request.id}"
        self._announce(MemoryUpdate.REMOVED, request.id)
        return response


    def on_add_knowledge(self, request: AddKnowledge.Request, response: AddKnowledge.Response) -> AddKnowledge.Response:
        """Store every entry or none: all are checked first; a store error part way removes what this request wrote."""
        store = self.knowledge.store
        try:
            entries = entries_from_msgs(request.entries)
            if not entries:
                raise KnowledgeError("no entries in the request")
            ids = [e.id for e in entries if e.id]
            twice = sorted({i for i in ids if ids.count(i) > 1})
            if twice:
                raise KnowledgeError(f"id {twice[0]!r} is given to more than one entry of the request")
            taken = [i for i in ids if i in store]
            if taken:
                raise KnowledgeError(f"a knowledge entry with id {taken[0]!r} already exists; leave id empty for a new one")
        except KnowledgeError as exc:
            response.success, response.message = False, f"nothing stored: {exc}"
            self.get_logger().warning(f"memory/add_knowledge: {response.message}")
            return response
        stored: list[str] = []
        try:
            for entry in entries:
                stored.append(store.add(entry))
        except TeachbotError as exc:  # e.g. a concurrent writer took an id, a full disk: undo this request's part
            for entry_id in stored:
                try:
                    store.remove(entry_id)
                except TeachbotError as undo:
                    self.get_logger().error(f"memory/add_knowledge: could not undo {entry_id}: {undo}")
            response.success, response.message = False, f"nothing stored: {exc}"
            self.get_logger().warning(f"memory/add_knowledge: {response.message}")
            return response
        response.success, response.ids = True, stored
        response.message = f"stored {len(stored)} knowledge entr{'y' if len(stored) == 1 else 'ies'}"
        for entry_id in stored:
            self._announce(MemoryUpdate.KNOWLEDGE_ADDED, entry_id)
        return response

    def on_retrieve_knowledge(self, request: RetrieveKnowledge.Request,
                              response: RetrieveKnowledge.Response) -> RetrieveKnowledge.Response:
        """The knowledge for a task; the image is compared only when it comes from this node's image embedder."""
        kind, skill = request.kind.strip(), request.skill.strip()
        if kind and kind not in KINDS:
            response.success, response.message = False, f"unknown kind filter {kind!r}; use one of {', '.join(KINDS)} or ''"
            return response
        embedder = self.knowledge.image_embedder
        image = None
        notes = []
        if len(request.image):
            if embedder is not None and request.image_model == embedder.name:
                image = list(request.image)
            else:
                notes.append(f"image of {request.image_model or 'an unnamed model'} not compared (this memory compares "
                             f"{embedder.name if embedder is not None else 'no images'})")
        try:
            found = self.knowledge.retrieve(request.task, request.object_name, image)
        except (TeachbotError, ValueError) as exc:  # e.g. a vector of another length under the same model name
            response.success, response.message = False, f"knowledge retrieval failed: {exc}"
            self.get_logger().warning(f"memory/retrieve_knowledge: {exc}")
            return response
        found = [r for r in found if (not kind or r.entry.kind == kind) and (not skill or r.entry.skill == skill)]
        response.entries = [entry_to_msg(r.entry) for r in found]
        response.reasons = [r.reason for r in found]
        response.scores = [float(r.score) for r in found]
        response.block = render(found, BLOCK_PREFIX)
        response.success = True
        response.message = "; ".join([f"{len(found)} entr{'y' if len(found) == 1 else 'ies'}", *notes])
        return response


def _retrieved(request: Any, response: Any) -> dict[str, Any]:
    """A retrieval's span: what was asked, and the examples found with their scores."""
    return {"retrieval.instructions": list(request.instructions), "retrieval.profile": request.profile,
            "retrieval.ids": [e.id for e in response.examples], "retrieval.scores": [round(float(s), 4) for s in response.scores]}


def _knowledge_retrieved(request: Any, response: Any) -> dict[str, Any]:
    return {"retrieval.task": request.task, "retrieval.object": request.object_name,
            "retrieval.ids": [e.id for e in response.entries], "retrieval.scores": [round(float(s), 4) for s in response.scores]}


def _added(request: Any, response: Any) -> dict[str, Any]:
    """A store's span: the id (or ids) stored, or why nothing was."""
    ids = getattr(response, "ids", None)
    return {"memory.stored_ids": list(ids) if ids is not None else [response.id] if getattr(response, "id", "") else [],
            "memory.message": response.message}


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot memory``."""
    return run_nodes([MemoryNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
