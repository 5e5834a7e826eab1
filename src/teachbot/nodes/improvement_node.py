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
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from teachbot_interfaces.msg import InteractionExample, LlmCompletion
from teachbot_interfaces.srv import AddExample, AddKnowledge, DescribeObject, Improve

from teachbot.config import load_yaml, resolve_config
from teachbot.knowledge.entry import KnowledgeEntry
from teachbot.knowledge.extractor import ExtractionConfig, KnowledgeExtractor
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.learning.improver import Improver, Lesson, deadline_message
from teachbot.llm.base import Model
from teachbot.llm.factory import model_from_config
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
from teachbot.nodes.nodeset import LLM_PARAMETERS, llm_settings
from teachbot.skills.parameters import WORLDS, SkillParameters

# seconds one perception/describe_object call may take (a learned image model on the CPU, a perception node busy with
# camera frames on a loaded machine); the request's deadline bounds it too, and a perception node that leaves the
# graph ends the wait at once
DESCRIBE_TIMEOUT = 10.0
STORE_WAIT = 0.5  # seconds to wait for memory/add_knowledge to be discovered before distilling nothing
NO_STORE = "nothing distilled: no memory node serves memory/add_knowledge"
PERCEPTION = "\0perception"  # the image cache's note of whether perception/describe_object is served (no object's name)


class ImprovementNode(Node):
    """Serves improvement/improve; one lesson at a time."""

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
        cfg = load_yaml(resolve_config(str(self.get_parameter("config").value)))["learning"]
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
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._workers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="improve")
        clients = ReentrantCallbackGroup()
        self.memory = self.create_client(AddExample, "memory/add", callback_group=clients)
        self.knowledge = self.create_client(AddKnowledge, "memory/add_knowledge", callback_group=clients)
        self.describe = self.create_client(DescribeObject, "perception/describe_object", callback_group=clients)
        self.create_service(Improve, "improvement/improve", self.on_improve, callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(f"improvement ready: mode {self.mode}, model {self.model.name}, "
                               f"distillation {'on' if self.distill else 'off'}")

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

    def _monotonic_deadline(self, stamp: Any) -> tuple[float, float]:
        """The request's deadline on time.monotonic() and the seconds it allowed from now."""
        wall = stamp.sec + stamp.nanosec * 1e-9
        seconds = self.deadline if wall <= 0 else wall - time.time()
        return time.monotonic() + seconds, seconds

    async def on_improve(self, request: Improve.Request, response: Improve.Response) -> Improve.Response:
        deadline, seconds = self._monotonic_deadline(request.deadline)
        if seconds <= 0:
            return self._refuse(response, deadline_message(seconds))
        profile = request.profile or "tabletop"
        if request.distill_only:
            return await self._distill_only(request, response, profile, deadline, seconds)
        # the LLM chain takes seconds: it runs on a worker thread while the executor keeps spinning
        # (the memory client's answer must be able to arrive on a single-threaded executor)
        work = self._workers.submit(self._learn, profile, request.transcript, list(request.scene_objects), deadline,
                                    request.problem, request.improvement)
        try:
            lesson = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - an LLM outage is an answer, not a crash
            return self._refuse(response, f"could not learn: {type(exc).__name__}: {exc}")
        await self._store_lesson(request, response, profile, lesson, deadline, seconds)
        # after the chain, whatever its verdict: the corrections may still teach facts (not for a candidate: it stores nothing)
        if self._can_distill(deadline) and not request.candidate_only:
            await self._distill(request, response, profile, deadline)
            if response.knowledge:
                self.get_logger().info(f"episode {request.episode_id or '?'}: {len(response.knowledge)} knowledge "
                                       f"entr{'y' if len(response.knowledge) == 1 else 'ies'} stored")
        return response

    async def _store_lesson(self, request: Improve.Request, response: Improve.Response, profile: str, lesson: Lesson,
                            deadline: float, seconds: float) -> None:
        """Fill ``response`` from the chain's lesson and store it through memory/add when it is good and in time."""
        response.problem, response.improvement, response.scope = lesson.problem, lesson.improvement, lesson.scope
        response.improved_transcript = lesson.transcript
        for note in lesson.notes:
            self.get_logger().info(f"episode {request.episode_id or '?'}: {note}")
        if not lesson.ok:
            self._refuse(response, lesson.reason, "lesson discarded: ")
            return
        example = InteractionExample(
            profile=profile, source="learned", transcript=lesson.transcript,
            instructions=Transcript.parse(lesson.transcript).instructions(), problem=lesson.problem,
            improvement=lesson.improvement, scope=lesson.scope, episode_id=request.episode_id, author_model=self.model.name,
        )
        now = datetime.now(UTC).timestamp()
        example.created.sec, example.created.nanosec = int(now), int((now % 1) * 1e9)
        response.example = example
        if request.candidate_only:  # the caller reads it back to the person and stores it once they agree
            response.stored, response.message = False, lesson.reason
            self.get_logger().info(f"episode {request.episode_id or '?'}: candidate lesson for the person to confirm: {lesson.reason}")
            return
        left = deadline - time.monotonic()
        if left < self.store_margin:  # the caller gives up at the deadline: store nothing it would not hear of
            message = deadline_message(seconds) if left <= 0 else (
                f"the learning call reached its deadline of {seconds:.1f} s (under {self.store_margin:g} s left to store "
                "the lesson); nothing was stored")
            self._refuse(response, message)
            return
        stored = await self.memory.call_async(AddExample.Request(example=example)) if self.memory.service_is_ready() else None
        response.stored = stored is not None and stored.success
        response.example_id = stored.id if stored is not None else ""
        response.example.id = response.example_id
        if response.stored:
            response.message = lesson.reason
            self.get_logger().info(f"lesson stored as {response.example_id}: {lesson.reason}")
        else:
            response.message = "the lesson could not be stored: " + (stored.message if stored else "the memory node is not running")
            self.get_logger().warning(response.message)

    # ------------------------------------------------------------------ distillation
    def _can_distill(self, deadline: float) -> bool:
        """Distillation is on and there is time to distil and store (whether a memory node keeps knowledge is
        checked on the worker, waiting briefly for its discovery, so the answer does not depend on graph timing)."""
        return self.distill and deadline - time.monotonic() >= self.store_margin

    async def _distill_only(self, request: Improve.Request, response: Improve.Response, profile: str, deadline: float,
                            seconds: float) -> Improve.Response:
        """A distill_only request: no improvement chain; ``stored`` says whether any knowledge was stored."""
        if not self.distill:
            why = ("knowledge.extraction.enabled is false in config/knowledge.yaml" if not self.extraction.enabled
                   else "the improvement node's distill parameter is false")
            return self._refuse(response, f"nothing distilled: {why}")
        if deadline - time.monotonic() < self.store_margin:
            return self._refuse(response, deadline_message(seconds))
        message = await self._distill(request, response, profile, deadline)
        response.stored = bool(response.knowledge_ids)
        response.message = message
        return response

    async def _distill(self, request: Improve.Request, response: Improve.Response, profile: str, deadline: float) -> str:
        """Run the extractor on a worker thread, store its entries; fill response.knowledge(_ids); returns what happened."""
        work = self._workers.submit(self._extract, profile, request, deadline)
        try:
            entries = await wait_for_worker(self, work)
        except Exception as exc:  # noqa: BLE001 - a bad transcript or config is an answer, not a crash
            message = f"nothing distilled: {type(exc).__name__}: {exc}"
            self.get_logger().warning(message)
            return message
        if entries is None:
            return NO_STORE
        if not entries:
            return "nothing distilled: the interaction holds no correction to remember"
        if deadline - time.monotonic() < self.store_margin:
            message = f"{len(entries)} knowledge entries distilled too late (under {self.store_margin:g} s to the deadline); nothing stored"
            self.get_logger().info(message)
            return message
        stored = await self.knowledge.call_async(AddKnowledge.Request(entries=[entry_to_msg(e) for e in entries]))
        if stored is None or not stored.success:
            message = "the knowledge could not be stored: " + (stored.message if stored is not None else "no answer from memory")
            self.get_logger().warning(message)
            return message
        response.knowledge = [e.text for e in entries]
        response.knowledge_ids = list(stored.ids)
        return "learned: " + " ".join(response.knowledge)

    def _extract(self, profile: str, request: Improve.Request, deadline: float) -> list[KnowledgeEntry] | None:
        """The extractor's entries, done while the store margin is still ahead (what comes later could not be stored);
        None, with no model call, when no memory node serves memory/add_knowledge."""
        until = deadline - self.store_margin
        if not self.knowledge.wait_for_service(timeout_sec=max(0.0, min(STORE_WAIT, until - time.monotonic()))):
            self.get_logger().info(NO_STORE)
            return None
        images: dict[str, tuple[list[float], str] | None] = {}
        with self._lock:
            return self._extractor(profile).extract(
                request.transcript, scene_objects=list(request.scene_objects), episode_id=request.episode_id,
                robot_id=self.robot_id, image_of=lambda name: self._image_of(name, images, until), deadline=until)

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
        if wait <= 0 or self._closing.is_set() or cache[PERCEPTION] is None:
            return None
        future = self.describe.call_async(DescribeObject.Request(name=name))
        ended = wait_served(future, wait, self.describe.service_is_ready, stop=self._closing.is_set)
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

    def _refuse(self, response: Improve.Response, message: str, log_prefix: str = "") -> Improve.Response:
        """Answer stored=False with ``message``, logged as one info line."""
        response.stored, response.message = False, message
        self.get_logger().info(log_prefix + message)
        return response

    def _learn(self, profile: str, transcript: str, scene_objects: list[str], deadline: float, problem: str = "",
               improvement: str = "") -> Lesson:
        with self._lock:  # a request queued behind another keeps its own deadline running
            return self._improver(profile).learn(
                transcript, scene_objects=scene_objects, deadline=deadline, cancelled=self._closing.is_set,
                problem=problem, improvement=improvement,
            )

    def close(self) -> None:
        self._closing.set()  # a running chain stops before its next LLM call
        self._workers.shutdown(wait=False, cancel_futures=True)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot improvement``."""
    return run_nodes([ImprovementNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
