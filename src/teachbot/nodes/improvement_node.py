"""ROS 2 node ``improvement``: learn_from_interaction() behind the service improvement/improve.

Runs the improvement chain (teachbot.learning.improver) with the improvement LLM of config/llm.yaml
and stores an accepted lesson through the memory node's memory/add service, with provenance.

Each request has a deadline (its ``deadline``, wall clock; when zero, now + ``learning.deadline``). The
chain stops at it, and a lesson is stored only while at least ``learning.store_margin`` seconds are left:
a caller that gave up at its deadline never finds a lesson stored behind its back.

Confirm-before-store (teachbot.interaction.confirm): a ``candidate_only`` request stores nothing, neither the
lesson nor distilled knowledge; the response's ``example`` is the lesson, which the caller stores through
memory/add once the person agrees. A request with ``improvement`` (the person's own sentence, and the candidate's
``problem``) runs only the scope and improved-transcript steps of the chain from that sentence.

Distillation (DROC, teachbot.knowledge.extractor): after the chain, and instead of it for a
``distill_only`` request, the knowledge extractor (the same model, the skill parameters of the request
profile's world) distils typed entries from the transcript; each entry about an object gets that
object's crop vector from perception/describe_object (when perception serves it) and all are stored
through memory/add_knowledge, within the same deadline and store margin. The response lists their texts
and ids. Nothing is distilled when knowledge.extraction.enabled in config/knowledge.yaml is false, when
the ``distill`` parameter is false, or when no memory node serves memory/add_knowledge (no LLM call is
spent on knowledge that could not be kept).

Rehearsal (teachbot.learning.rehearsal, config/learning.yaml ``rehearsal``): an improved lesson is replayed from the
request's ``initial_scene`` (the perceived objects when the episode's first request came) in a fresh simulated
tabletop built from it, and stored only when it runs without errors and ends at the request's ``accepted_scene``.
A ``defer`` request (the console will say when the person accepts the corrected task) stores such a lesson not yet:
the response is ``pending`` with the lesson as its example, and improvement/keep_lesson (KeepLesson.srv) later
replays it against the scene the person accepted and stores it through memory/add only when it ends there.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.trace import SpanKind
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from teachbot_interfaces.msg import LlmCompletion
from teachbot_interfaces.srv import AddExample, AddKnowledge, DescribeObject, Improve, KeepLesson

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import MemoryStoreError
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.extractor import ExtractionConfig, KnowledgeExtractor
from teachbot.language.registry import NotAvailableError, RobotApi
from teachbot.learning.call import LearnRequest
from teachbot.learning.improver import Improver
from teachbot.learning.learner import STORE_WAIT, Learned, Learner, learning_config
from teachbot.learning.rehearsal import RehearsalConfig, Rehearser
from teachbot.llm.base import Model
from teachbot.llm.factory import model_from_config
from teachbot.memory.example import InteractionExample
from teachbot.nodes.common import (
    DONE,
    GONE,
    TRANSCRIPT_QOS,
    completion_publisher,
    refuse_duplicate,
    run_nodes,
    wait_for_worker,
    wait_served,
)
from teachbot.nodes.knowledge_convert import entry_to_msg
from teachbot.nodes.memory_node import from_msg, to_msg
from teachbot.nodes.nodeset import LLM_PARAMETERS, llm_settings
from teachbot.simrobot.snapshot import Scene, scene_from_json
from teachbot.skills.parameters import SkillParameters
from teachbot.tracing import span, trace_parent

WORLDS = ("tabletop", "household")  # the worlds with skill parameters (config/skill_parameters.yaml)
# seconds one perception/describe_object call may take (a learned image model on the CPU, a perception node busy with
# camera frames on a loaded machine); the request's deadline bounds it too, and a perception node that leaves the
# graph ends the wait at once
DESCRIBE_TIMEOUT = 10.0
# seconds the memory node may take to answer memory/add or memory/add_knowledge (a file write, a database row; a
# memory node that leaves the graph ends the wait at once)
STORE_ANSWER_TIMEOUT = 60.0
PERCEPTION = "\0perception"  # the image cache's note of whether perception/describe_object is served (no object's name)


class MemoryServices:
    """The learner's lesson and knowledge stores: the memory node's memory/add and memory/add_knowledge, called
    from the learner's worker thread while the node's executor spins."""

    def __init__(self, node: ImprovementNode) -> None:
        self.node = node

    def add(self, example: InteractionExample) -> str:
        reply = self._call(self.node.memory, AddExample.Request(example=to_msg(example)), "memory/add")
        if not reply.success:
            raise MemoryStoreError(reply.message)
        return str(reply.id)

    def ready(self, wait: float) -> bool:
        return self.node.knowledge.wait_for_service(timeout_sec=wait)

    def add_entries(self, entries: Sequence[KnowledgeEntry]) -> list[str]:
        reply = self._call(self.node.knowledge, AddKnowledge.Request(entries=[entry_to_msg(e) for e in entries]),
                           "memory/add_knowledge")
        if not reply.success:
            raise MemoryStoreError(reply.message)
        return list(reply.ids)

    def _call(self, client: Any, request: Any, name: str) -> Any:
        if not client.service_is_ready():
            raise NotAvailableError("the memory node is not running")
        request.trace_parent = trace_parent()  # the memory node's span joins the learning's trace
        future = client.call_async(request)
        ended = wait_served(future, STORE_ANSWER_TIMEOUT, client.service_is_ready, stop=self.node.closing.is_set)
        if ended != DONE:
            client.remove_pending_request(future)
            why = "its node left the ROS graph" if ended == GONE else f"no answer in {STORE_ANSWER_TIMEOUT:g} s"
            raise MemoryStoreError(f"{name}: {why}")
        return future.result()


class _KnowledgeServices:
    """memory/add_knowledge as the learner's KnowledgeSink."""

    def __init__(self, services: MemoryServices) -> None:
        self.services = services

    def ready(self, wait: float) -> bool:
        return self.services.ready(wait)

    def add(self, entries: Sequence[KnowledgeEntry]) -> list[str]:
        return self.services.add_entries(entries)


class ImprovementNode(Node):
    """Serves improvement/improve with the one :class:`~teachbot.learning.learner.Learner`; one lesson at a time."""

    def __init__(self, model: Model | None = None, **overrides: Any) -> None:
        """ROS parameters (also keyword arguments): config, llm_config, llm_backend, llm_model, llm_base_url,
        knowledge_config (a knowledge.yaml; default config/knowledge.yaml), distill (false: never distil
        knowledge), robot_id (the provenance of distilled knowledge; default the host name); any other
        keyword overrides a key of the learning section (e.g. ``mode``)."""
        super().__init__("improvement")
        for name, default in (("config", "learning"), ("knowledge_config", ""), ("robot_id", ""),
                              *((key, "") for key in LLM_PARAMETERS)):
            self.declare_parameter(name, str(overrides.pop(name, default)))
        distill = overrides.pop("distill", True)
        if not isinstance(distill, bool):
            distill = str(distill).strip().lower() not in ("false", "0", "no", "off")
        self.declare_parameter("distill", distill)
        cfg = learning_config(str(self.get_parameter("config").value))
        cfg.update(overrides)
        refuse_duplicate(self)
        self.mode = str(cfg["mode"])
        self.deadline = float(cfg.get("deadline", 120.0))  # seconds, for a request without a deadline
        self.store_margin = float(cfg.get("store_margin", 2.0))
        llm = {k: str(self.get_parameter(k).value) for k in LLM_PARAMETERS}
        self.model = model or model_from_config(llm_settings(**llm), "improvement")
        # every LLM call of the chain, with its prompt digest, so a recorded session can be replayed
        add = getattr(self.model, "add_listener", None)
        if add is not None:
            publisher = self.create_publisher(LlmCompletion, "improvement/completions", TRANSCRIPT_QOS)
            add(completion_publisher(self, publisher, "improvement"))
        self._improvers: dict[str, Improver] = {}
        self._extractors: dict[str, KnowledgeExtractor] = {}
        self.extraction = ExtractionConfig.load(str(self.get_parameter("knowledge_config").value) or None)
        self.distill = bool(self.get_parameter("distill").value) and self.extraction.enabled
        self.robot_id = str(self.get_parameter("robot_id").value) or socket.gethostname()
        self.closing = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="improve")
        clients = ReentrantCallbackGroup()
        self.memory = self.create_client(AddExample, "memory/add", callback_group=clients)
        self.knowledge = self.create_client(AddKnowledge, "memory/add_knowledge", callback_group=clients)
        self.describe = self.create_client(DescribeObject, "perception/describe_object", callback_group=clients)
        services = MemoryServices(self)
        why = ("knowledge.extraction.enabled is false in config/knowledge.yaml" if not self.extraction.enabled
               else "the improvement node's distill parameter is false")
        logger = self.get_logger()
        self.rehearsal = Rehearser({"tabletop": tabletop_functions}, RehearsalConfig.from_config(cfg.get("rehearsal")))
        self.learner = Learner(self._improver, services, extractor=self._extractor, knowledge=_KnowledgeServices(services),
                               images=self._images, store_margin=self.store_margin, robot_id=self.robot_id,
                               distill=self.distill, why_not_distill=why, cancelled=self.closing.is_set,
                               rehearsal=self.rehearsal, log=logger.info, warn=logger.warning)
        self.create_service(Improve, "improvement/improve", self.on_improve, callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(KeepLesson, "improvement/keep_lesson", self.on_keep_lesson,
                            callback_group=MutuallyExclusiveCallbackGroup())
        logger.info(f"improvement ready: mode {self.mode}, model {self.model.name}, "
                    f"distillation {'on' if self.distill else 'off'}, rehearsal {'on' if self.rehearsal.enabled else 'off'}")

    def _improver(self, profile: str) -> Improver:
        if profile not in self._improvers:
            self._improvers[profile] = Improver(self.model, RobotApi.load(profile), self.mode)
        return self._improvers[profile]

    def _extractor(self, profile: str) -> KnowledgeExtractor:
        """The profile's extractor: its robot API and the skill parameters of its world (tabletop or household)."""
        if profile not in self._extractors:
            api = RobotApi.load(profile)
            world = api.profile if api.profile in WORLDS else "tabletop"
            self._extractors[profile] = KnowledgeExtractor(self.model, api, SkillParameters.load(world), self.extraction)
        return self._extractors[profile]

    async def on_improve(self, request: Improve.Request, response: Improve.Response) -> Improve.Response:
        scenes = self._scenes(request, request.episode_id)
        learn = LearnRequest(request.profile or "tabletop", request.episode_id, request.transcript,
                             tuple(request.scene_objects), self._deadline(request), store=not request.candidate_only,
                             problem=request.problem, improvement=request.improvement,
                             initial_scene=scenes[0], accepted_scene=scenes[1], defer=request.defer)
        # the LLM chain takes seconds: it runs on a worker thread while the executor keeps spinning
        # (the memory node's answers must be able to arrive on a single-threaded executor)
        run = self.learner.distill_only if request.distill_only else self.learner.learn
        work = self._workers.submit(self._traced, request.trace_parent, run, learn)
        try:
            learned = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - an LLM outage is an answer, not a crash
            message = f"could not learn: {type(exc).__name__}: {exc}"
            self.get_logger().info(message)
            return self._answer(response, Learned(False, message))
        return self._answer(response, learned)

    async def on_keep_lesson(self, request: KeepLesson.Request, response: KeepLesson.Response) -> KeepLesson.Response:
        """A pending lesson, now that the person accepted the corrected task: tried, and stored only when kept."""
        lesson = from_msg(request.example)
        initial, accepted = self._scenes(request, lesson.episode_id)
        try:
            learned_scene = scene_from_json(request.learned_scene)
        except ValueError:
            learned_scene = ()
        learn = LearnRequest(lesson.profile or "tabletop", lesson.episode_id, "", (), self._deadline(request),
                             initial_scene=initial, accepted_scene=accepted, learned_scene=learned_scene)
        work = self._workers.submit(self._traced, request.trace_parent, lambda r: self.learner.keep_pending(r, lesson), learn)
        try:
            learned = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - a crash is an answer: the lesson is not kept
            learned = Learned(False, f"the lesson could not be kept: {type(exc).__name__}: {exc}")
            self.get_logger().warning(learned.message)
        response.stored, response.message, response.example_id = learned.stored, learned.message, learned.example_id
        response.rehearsal = learned.rehearsal.verdict if learned.rehearsal is not None else ""
        return response

    def _deadline(self, request: Improve.Request | KeepLesson.Request) -> float:
        """The request's wall-clock deadline; when it has none, the configured one from now."""
        wall = request.deadline.sec + request.deadline.nanosec * 1e-9
        return wall if wall > 0 else time.time() + self.deadline

    def _scenes(self, request: Improve.Request | KeepLesson.Request, episode: str) -> tuple[Scene, Scene]:
        """The request's initial and accepted scenes (JSON); none when they do not parse (the lesson is not tried)."""
        try:
            return scene_from_json(request.initial_scene), scene_from_json(request.accepted_scene)
        except ValueError as exc:
            self.get_logger().warning(f"episode {episode or '?'}: {exc}")
            return (), ()

    def _traced(self, parent: str, run: Callable[[LearnRequest], Learned], learn: LearnRequest) -> Learned:
        """The learner on the worker thread, as a span of the caller's trace (the request's trace_parent)."""
        with span("improvement.serve", {"learning.episode_id": learn.episode_id}, parent=parent, node=self.get_name(),
                  kind=SpanKind.SERVER):
            return run(learn)

    @staticmethod
    def _answer(response: Improve.Response, learned: Learned) -> Improve.Response:
        """Fill ``response`` from what the learner did."""
        response.stored, response.message, response.pending = learned.stored, learned.message, learned.pending
        if learned.lesson is not None:
            lesson = learned.lesson
            response.problem, response.improvement, response.scope = lesson.problem, lesson.improvement, lesson.scope
            response.improved_transcript = lesson.transcript
        if learned.example is not None:
            response.example = to_msg(learned.example)
        response.example_id = learned.example_id
        response.knowledge = list(learned.knowledge)
        response.knowledge_ids = list(learned.knowledge_ids)
        return response

    def _images(self, until: float) -> Any:
        """Per request: an object's crop vector and embedder from perception, asked before ``until``."""
        cache: dict[str, tuple[list[float], str] | None] = {}
        return lambda name: self._image_of(name, cache, until)

    def _image_of(self, name: str, cache: dict[str, tuple[list[float], str] | None],
                  deadline: float) -> tuple[list[float], str] | None:
        """The object's crop vector and its embedder from perception (on the worker thread, before ``deadline``);
        None when perception does not serve it or cannot see the object."""
        if name in cache:
            return cache[name]
        cache[name] = None
        if PERCEPTION not in cache:  # once per request: is perception there (discovery may lag a moment)?
            ready = self.describe.wait_for_service(timeout_sec=max(0.0, min(STORE_WAIT, deadline - time.monotonic())))
            cache[PERCEPTION] = ([], "") if ready else None
        wait = min(DESCRIBE_TIMEOUT, deadline - time.monotonic())
        if wait <= 0 or self.closing.is_set() or cache[PERCEPTION] is None:
            return None
        future = self.describe.call_async(DescribeObject.Request(name=name))
        ended = wait_served(future, wait, self.describe.service_is_ready, stop=self.closing.is_set)
        if ended != DONE:
            self.describe.remove_pending_request(future)
            why = "its node left the ROS graph" if ended == GONE else f"it did not answer in {wait:.1f} s"
            self.get_logger().info(f"no image of {name!r}: perception/describe_object: {why}")
            return None
        reply = future.result()
        if reply is None or not reply.success or not len(reply.embedding):
            self.get_logger().info(f"no image of {name!r}: {reply.message if reply is not None else 'no answer'}")
            return None
        cache[name] = ([float(v) for v in reply.embedding], reply.image_model)
        return cache[name]

    def close(self) -> None:
        self.closing.set()  # a running chain stops before its next LLM call
        self._workers.shutdown(wait=False, cancel_futures=True)


def tabletop_functions(skills: Any, objects: Callable[[], dict[str, list[float]]], dialog: Any) -> dict[str, Callable[..., Any]]:
    """The tabletop robot functions a lesson's rehearsal binds to the copy of the world."""
    return TabletopRobot(skills, objects, dialog).functions()


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot improvement``."""
    return run_nodes([ImprovementNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
