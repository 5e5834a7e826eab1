"""ROS 2 node ``interaction_manager``: the console (teachbot.interaction) with the robot API proxied to the other nodes.

In:  dialog/user (DialogTurn; a stop word while the arm moves cancels its goals: interaction.spoken_stop), the
     object list topic of config/interaction.yaml (perception/objects),
     improvement/completions (for the episode's token and cost account), the emergency stop (std_msgs/Bool:
     true cancels the goals in flight and refuses robot calls until false).
Out: dialog/robot (DialogTurn), interaction/transcript (TranscriptUpdate, every statement and result),
     interaction/completions (LlmCompletion with the prompt digest, so a bag can replay the session),
     interaction/pending_lesson (InteractionExample: the lesson read back to the person while they are asked).
A dialog/user turn of type ``end`` ends the conversation (the robot's next wait finds nobody); one of type
``answer:<id>`` is a page button's answer to the question of that id (a robot turn of type ``question:<kind>:<id>``),
taken only while that question is open (teachbot.language.dialog). The
``confirm_lessons`` parameter (config/interaction.yaml; settable at run time) turns confirm-before-store on:
lessons are stored through memory/add once the person agrees (teachbot.nodes.confirmed_lessons).
Uses the skills' actions through a SkillClient, memory/retrieve for the prompt's examples and
memory/retrieve_knowledge for its "What I know" block and learned skill parameters (the same stores read
in this process when the service does not answer), perception/describe_object for the looks of the
object at hand, and improvement/improve for learning and for distilling knowledge at the end of a task.
A node of the stack (perception, memory, improvement, issue_detection) that leaves the ROS graph while a skill
runs stops the skill with one error line (teachbot.nodes.stack_watchdog; ``watch_nodes`` overrides which).
Household: the task memory (config/task_memory.yaml) over memory/begin_task, memory/log_task_action and
memory/query_task_memory (the same store in this process when they do not answer); every acting robot call
is logged with the world after it, from the object list and the thing states (teachbot.nodes.task_memory_client).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from builtin_interfaces.msg import Time
from rclpy.node import Node
from std_msgs.msg import Bool
from teachbot_interfaces.msg import DialogTurn, LlmCompletion, ObjectList, ThingStates, TranscriptUpdate
from teachbot_interfaces.srv import DescribeObject, Improve, RetrieveExamples, RetrieveKnowledge

from teachbot.config import load_yaml, resolve_config
from teachbot.console.emergency_stop import EmergencyStop
from teachbot.console.household_api import HouseholdRobot
from teachbot.console.issue_guard import IssueGuard
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import TeachbotError
from teachbot.interaction import (
    CoreConfig,
    FallbackExamples,
    InteractionCore,
    LearnReply,
    LearnRequest,
    LocalExamples,
    MemoryUnavailable,
    render_example,
)
from teachbot.interaction.knowledge import ConsoleKnowledge, FallbackKnowledge, Found, LocalKnowledge
from teachbot.interaction.spoken_stop import STOP_WORDS, SpokenStop, StoppableSkills
from teachbot.knowledge import KnowledgeRetriever, KnowledgeStore
from teachbot.knowledge.correction import CorrectionConfig, CorrectionHandler
from teachbot.knowledge.object_crop import knowledge_settings
from teachbot.language.dialog import DialogChannel, Question, answer_type, question_type, turn_question
from teachbot.language.registry import NotAvailableError, RobotApi
from teachbot.language.transcript import Entry
from teachbot.llm.abandon import Abandon, ModelAbandoned, abandonable
from teachbot.llm.base import Completion, Model
from teachbot.llm.factory import model_from_config
from teachbot.llm.pricing import PriceTable
from teachbot.memory.config import MemoryConfig
from teachbot.memory.example import InteractionExample
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, TRANSCRIPT_QOS, completion_publisher, refuse_duplicate, run_nodes
from teachbot.nodes.confirmed_lessons import ConfirmedLessons
from teachbot.nodes.knowledge_convert import entries_from_msgs
from teachbot.nodes.nodeset import LLM_PARAMETERS, llm_settings
from teachbot.nodes.raider_ros import IssueDetectionClient
from teachbot.nodes.skill_client import DONE, GONE, STOPPED, Fault, SkillClient, wait_served
from teachbot.nodes.stack_watchdog import WATCHED, StackWatchdog, call_fault, motion_fault
from teachbot.nodes.task_memory_client import FallbackTaskMemory, RemoteTaskMemory, perceived_environment
from teachbot.nodes.task_memory_service import working_memory_maker
from teachbot.raider.config import RaiderConfig
from teachbot.raider.recovery import RecoveryPlanner
from teachbot.robot_profile import RobotProfile
from teachbot.sandbox.executor import SandboxLimits
from teachbot.simrobot.snapshot import Scene, scene_from_positions, scene_to_json
from teachbot.skills.parameters import SkillParameters
from teachbot.taskmemory import ConsoleTaskMemory, TaskMemory, TaskMemoryConfig
from teachbot.tracing import trace_parent
from teachbot.world.household_objects import Catalog

RETRIEVE_TIMEOUT = 10.0  # seconds memory/retrieve may take before the store is read locally
MEMORY_DISCOVERY = 5.0  # seconds the console looks for a memory node (one started beside it) before it opens the store itself
MEMORY_STARTUP = 120.0  # seconds a memory node already on the graph may take to serve memory/retrieve (it loads its model)
TASK_MEMORY_TIMEOUT = 30.0  # seconds a task-memory service may take (a worker LLM writes the working memory)
SETTLE_TIMEOUT = 1.0  # seconds an action's log waits for perception to report the world after it
DESCRIBE_TIMEOUT = 5.0  # seconds perception/describe_object may take (else: the object by name only)


class InteractionManagerNode(Node):
    """Runs the console's episodes on a session thread; translates its callbacks into topics and services."""

    def __init__(
        self, interaction_model: Model | None = None, function_model: Model | None = None, namespace: str = "",
        correction_model: Model | None = None, recovery_model: Model | None = None, **overrides: Any,
    ) -> None:
        """``correction_model``: the LLM of DROC's correction handler. A console whose interaction model is
        given by code (tests, recordings) has the handler only when this is given too; one configured from
        config/llm.yaml gets the ``correction`` role's model. ``corrections: false`` (an override or a key of
        config/interaction.yaml) or ``knowledge.corrections.enabled: false`` turns the handler off.
        ``recovery_model``: RAIDER's recovery planner for the guard in block mode, the same way (the
        ``recovery`` role's model when the console is configured from config/llm.yaml)."""
        super().__init__("interaction_manager", namespace=namespace)
        # ROS parameters, also keyword arguments; any other keyword overrides a key of config/interaction.yaml
        for name, default in (("config", "interaction"), ("memory", ""), ("api_profile", ""), *((key, "") for key in LLM_PARAMETERS)):
            self.declare_parameter(name, str(overrides.pop(name, default)))
        cfg = load_yaml(resolve_config(str(self.get_parameter("config").value)))["interaction"]
        if self.get_parameter("api_profile").value:  # another robot API: its keys from the config's profiles
            cfg["api_profile"] = str(self.get_parameter("api_profile").value)
        cfg.update(cfg.get("profiles", {}).get(str(cfg["api_profile"]), {}))
        cfg.update(overrides)
        refuse_duplicate(self)
        api = RobotApi.load(str(cfg["api_profile"]))
        self.robot_pub = self.create_publisher(DialogTurn, "dialog/robot", COMMAND_QOS)
        # a console that joins late (teachbot chat) still gets the recent transcript
        self.transcript_pub = self.create_publisher(TranscriptUpdate, "interaction/transcript", TRANSCRIPT_QOS)
        self.completion_pub = self.create_publisher(LlmCompletion, "interaction/completions", TRANSCRIPT_QOS)
        self.dialog = DialogChannel(self._say, timeout=float(cfg["dialog_timeout"]), on_question=self._ask)
        self.create_subscription(DialogTurn, "dialog/user", self.on_user, COMMAND_QOS)
        self._objects: dict[str, list[float]] | None = None  # None until the first object list arrives
        self._sizes: dict[str, list[float]] = {}  # each object's extent, for grounding corrections in its scale
        self._labels: dict[str, str] = {}  # each object's detector class (its type when no thing state says one)
        self._objects_arrived = threading.Event()
        self._object_lists = threading.Condition()  # counts the lists, so an action's log can wait for a newer one
        self._lists_seen = 0
        self.objects_wait = float(cfg.get("objects_wait", 5.0))
        self.objects_topic = str(cfg["objects_topic"])
        self.create_subscription(ObjectList, self.objects_topic, self.on_objects, LATCHED_QOS)
        self.create_subscription(LlmCompletion, "improvement/completions", self.on_improvement_completion, TRANSCRIPT_QOS)
        self.skill_timeout = float(cfg["skill_timeout"])
        self._states: dict[str, dict[str, Any]] = {}
        self._places: dict[str, str] = {}  # household thing -> the place it stands at (list_objects(location))
        self._things: dict[str, tuple[str, str, bool]] = {}  # household thing -> (type, place, held), for the task memory
        robot = RobotProfile.load(str(cfg.get("robot_profile", "household_sim" if api.profile == "household" else "panda_sim")))
        self.estop = EmergencyStop(str(cfg.get("emergency_stop_topic") or robot.topics["emergency_stop"]))
        self.create_subscription(Bool, self.estop.topic, self.on_emergency_stop, COMMAND_QOS)
        self.spoken_stop = SpokenStop(cfg.get("spoken_stop_words") or STOP_WORDS)  # words that halt the arm while it moves
        if api.profile == "household":
            self.skills = SkillClient(self, profile=robot)
            self.create_subscription(ThingStates, str(cfg.get("states_topic", "/sim/states")), self.on_states, LATCHED_QOS)
            implementations = HouseholdRobot(StoppableSkills(self.skills, self.skill_timeout, self.estop, self.spoken_stop),
                                             lambda: list(self._current_objects()),
                                             lambda: dict(self._states), self.dialog, where=lambda: dict(self._places)).functions()
        else:
            self.skills = SkillClient(self)
            implementations = TabletopRobot(StoppableSkills(self.skills, self.skill_timeout, self.estop, self.spoken_stop),
                                            self._current_objects, self.dialog).functions()
        self.watchdog = StackWatchdog(self, lambda: sorted({h.name for h in self.skills.in_flight()}), self.on_node_left,
                                      names=cfg.get("watch_nodes", WATCHED))
        # check_action() and the guard before physical functions: the issue_detection node (config/raider.yaml)
        raider = RaiderConfig.load()
        self.issue_client = IssueDetectionClient(self, timeout=raider.time_limit + 10.0)
        guard_mode = str(cfg.get("issue_guard") or raider.guard_mode(api.profile))  # a keyword override, else raider.yaml
        self.guard = IssueGuard(self.issue_client, guard_mode, raider.guarded.get(api.profile, ()), log=self.get_logger().info)
        implementations = self.guard.wrap({**implementations, "check_action": self.guard.check_action})
        self.task_memory: Any = None
        if api.profile == "household":
            implementations = self._task_memory(cfg, implementations)
        implementations = self.spoken_stop.wrap(implementations)  # hearing the person lifts a spoken stop
        self.improve_client = self.create_client(Improve, "improvement/improve")
        self.retrieve_client = self.create_client(RetrieveExamples, "memory/retrieve")
        llm_raw = llm_settings(**{key: str(self.get_parameter(key).value) for key in LLM_PARAMETERS})
        self.prices = PriceTable.load()
        # close() does not wait for an LLM call in flight: it abandons it (teachbot.llm.abandon)
        self._abandon = Abandon()
        model = abandonable(interaction_model or model_from_config(llm_raw, "interaction"), self._abandon)
        functions = abandonable(function_model or model_from_config(llm_raw, "function_generation"), self._abandon)
        for role, each in (("interaction", model), ("function_generation", functions)):
            add = getattr(each, "add_listener", None)
            if add is not None:
                add(completion_publisher(self, self.completion_pub, role, self.prices))
        corrections = self._correction_handler(api, cfg, llm_raw, correction_model, interaction_model is None)
        if self.guard.mode == "block":  # the ActionIssue line carries a recovery plan (the RAIDER paper's Figure 7)
            planner = recovery_model or (model_from_config(llm_raw, "recovery") if interaction_model is None else None)
            if planner is not None:
                self.guard.planner = RecoveryPlanner(abandonable(planner, self._abandon), api)
                self.guard.held = self._held
        learning = load_yaml(resolve_config("learning")).get("learning", {})
        local = self.local_examples = LocalExamples(str(self.get_parameter("memory").value))
        self._local_knowledge: _LocalKnowledgeBase | None = None
        knowledge = self._knowledge(api, cfg, local)
        self.lessons = ConfirmedLessons(self, bool(cfg.get("confirm_lessons", False)), _call)
        self.core = InteractionCore(
            api, implementations, self.dialog, model, function_model=functions,
            examples=FallbackExamples(self._retrieve, local, self.get_logger().warning),
            config=CoreConfig.from_config(cfg, learning), learner=self,
            scene_objects=self.list_objects, on_kill=self.skills.cancel_all, on_entry=self._publish_entry,
            limits=SandboxLimits.from_config(load_yaml(resolve_config("sandbox")).get("limits", {})),
            log=self.get_logger().info, prices=self.prices, corrections=corrections, knowledge=knowledge,
            known_objects=lambda: sorted(self._objects or {}), on_pending_lesson=self.lessons.pending, node=self.get_name(),
            scene_state=self._scene if api.profile != "household" else None,
        )
        self.lessons.attach(self.core)
        self._closing = threading.Event()
        self._ready_line = f"interaction manager ready: profile {api.profile}, model {model.name}; waiting for the person to speak"
        self._thread = threading.Thread(target=self._run, daemon=True, name="console")
        self._thread.start()

    def _run(self) -> None:
        """The console thread: the prompt's examples made available first, then the episodes."""
        self._prepare_memory()
        if not self._closing.is_set():
            self.get_logger().info(self._ready_line)
            self.core.run()

    def _prepare_memory(self) -> None:
        """Before the console's first wait for the person: the memory node serves memory/retrieve, or else the store
        is opened in this process now. Opening it loads the sentence embedder (seconds; a minute on a loaded
        machine): done here, before the console says it is ready, it never holds up an answer the person waits for.
        A memory node that is on the graph but not serving yet is starting (it loads the same model): it is waited for."""
        started = time.monotonic()
        while not self.retrieve_client.service_is_ready():
            waited = time.monotonic() - started
            if waited > MEMORY_STARTUP or (waited > MEMORY_DISCOVERY and not self._memory_node_on_graph()):
                break
            if self._closing.wait(0.05):
                return
        else:
            return
        self.get_logger().info(f"no memory node serves memory/retrieve: opening the example store in this process "
                               f"({self.local_examples.where}) before the console is ready")
        try:
            self.local_examples.warm_up()
            if self._local_knowledge is not None:
                self._local_knowledge.warm_up()
        except (TeachbotError, OSError) as exc:  # the first retrieval tries again and says what is wrong
            self.get_logger().error(f"opening the example store in this process failed: {exc}")

    def _memory_node_on_graph(self) -> bool:
        return ("memory", self.get_namespace()) in self.get_node_names_and_namespaces()

    def _knowledge(self, api: RobotApi, cfg: dict[str, Any], local: LocalExamples) -> ConsoleKnowledge | None:
        """The console's knowledge base: memory/retrieve_knowledge, else the same store in this process."""

        if not bool(cfg.get("knowledge", True)):
            return None
        self.knowledge_client = self.create_client(RetrieveKnowledge, "memory/retrieve_knowledge")
        self.describe_client = self.create_client(DescribeObject, "perception/describe_object")
        parameters = SkillParameters.load("household" if api.profile == "household" else "tabletop")
        self._local_knowledge = _LocalKnowledgeBase(local)
        source = FallbackKnowledge(_RemoteKnowledge(self), self._local_knowledge, self.get_logger().warning)
        return ConsoleKnowledge(source, parameters.declared, self.get_logger().info)

    def _task_memory(self, cfg: dict[str, Any], implementations: dict[str, Any]) -> dict[str, Any]:
        """``implementations`` with the task memory: its four functions, the acting ones logged (config/task_memory.yaml;
        ``task_memory: false`` turns it off). The memory node's, else the same store in this process."""

        config = TaskMemoryConfig.load()
        if not (config.enabled and bool(cfg.get("task_memory", True))):
            return implementations
        catalog = Catalog.load()
        self._colors, self._type_colors = dict(catalog.colors), {t: k.color for t, k in catalog.types.items()}
        self._settle = float(cfg.get("task_memory_settle", SETTLE_TIMEOUT))
        timeout = float(cfg.get("task_memory_timeout", TASK_MEMORY_TIMEOUT))
        remote = RemoteTaskMemory(self, config, _call, self.task_environment, timeout)
        self.task_memory = FallbackTaskMemory(remote, lambda: self._local_task_memory(config, cfg), self.task_environment,
                                              self.get_logger().warning, self._settled_environment)
        return ConsoleTaskMemory(self.task_memory).wrap(implementations)

    def _local_task_memory(self, config: Any, cfg: dict[str, Any]) -> Any:
        """The task memory in this process, on the memory node's store: the ``tasks_dir`` override, "tasks" next to
        the ``memory`` store, else memory.store.tasks_dir of config/memory.yaml."""


        learned = str(self.get_parameter("memory").value)
        directory = (Path(str(cfg["tasks_dir"])).expanduser() if cfg.get("tasks_dir") else
                     Path(learned).expanduser().resolve().parent / "tasks" if learned else MemoryConfig.load().tasks_path)
        llm = llm_settings(**{key: str(self.get_parameter(key).value) for key in LLM_PARAMETERS})
        worker = working_memory_maker(config, self.get_logger().warning, llm)
        return TaskMemory(directory, config, "household", self.task_environment, worker)

    def task_environment(self, wait: bool = True) -> dict[str, Any]:
        """What is where now, for the task memory: perception's objects with the household's thing states
        (``wait``: just after start, up to objects_wait seconds for the first object list; else {})."""

        if wait and self._objects is None:
            self._objects_arrived.wait(self.objects_wait)
        return perceived_environment(self._objects or {}, self._sizes, self._labels, self._things, self._colors,
                                     self._type_colors)

    def _settled_environment(self) -> dict[str, Any]:
        """The world after an action: once perception has sent two object lists since (the first may predate it);
        at once when no perception has sent any."""
        with self._object_lists:
            wanted = self._lists_seen + 2
            if self._lists_seen:
                self._object_lists.wait_for(lambda: self._lists_seen >= wanted, timeout=self._settle)
        return self.task_environment(wait=False)

    def describe(self, name: str) -> tuple[list[float], str]:
        """The named object's crop vector and its embedder from perception; ([], '') when it cannot say."""
        if not self.describe_client.service_is_ready():
            return [], ""
        try:
            reply = _call(self.describe_client, DescribeObject.Request(name=name), DESCRIBE_TIMEOUT, "perception/describe_object")
        except TimeoutError as exc:
            self.get_logger().info(f"no image of {name!r}: {exc}")
            return [], ""
        if not reply.success:
            self.get_logger().debug(f"no image of {name!r}: {reply.message}")
            return [], ""
        return list(reply.embedding), str(reply.image_model)

    def _correction_handler(self, api: RobotApi, cfg: dict[str, Any], llm_raw: dict[str, Any], model: Model | None,
                            configured: bool) -> Any:
        """DROC's correction handler (see __init__), or None."""

        config = CorrectionConfig.load()
        if not (config.enabled and bool(cfg.get("corrections", True))) or (model is None and not configured):
            return None
        model = model or model_from_config(llm_raw, "correction")
        add = getattr(model, "add_listener", None)
        if add is not None:  # recorded with the console's calls, so a bag replays the handler too
            add(completion_publisher(self, self.completion_pub, "correction", self.prices))
        profile = RobotProfile.load(str(cfg.get("robot_profile", "household_sim" if api.profile == "household" else "panda_sim")))
        world = "household" if api.profile == "household" else "tabletop"
        parameters = SkillParameters.load(world, profile=profile)  # defaults that are the profile's own values
        return CorrectionHandler(abandonable(model, self._abandon), api, parameters, config, object_size=self._sizes.get)

    # ------------------------------------------------------------------ topics
    def on_user(self, msg: DialogTurn) -> None:
        if msg.type == "end":  # the person ended the conversation (the page's button, /end in teachbot chat)
            self.dialog.end_conversation()
            return
        # a person who speaks while the robot holds something out to them has taken it: let go (the
        # words still reach the console, as the answer to its next wait_for_trigger())
        if self.skills.waiting_on("handover_object_to_human", "handover"):
            self.get_logger().info("the person spoke during a handover: letting go")
            self.skills.release_handover_async()
        elif self.spoken_stop.heard(msg.text, bool(self.skills.in_flight())):  # "stop!" while the arm moves
            self.get_logger().warning(f"the person said {msg.text!r} while the robot moved: cancelling the goals in flight")
            threading.Thread(target=self._cancel_goals, args=("spoken stop", self.spoken_stop.fault), daemon=True,
                             name="spoken-stop-cancel").start()
        _kind, question = turn_question(msg.type)  # a page's button names the question it answers
        self.dialog.put_user(msg.text, answers=question if msg.type == answer_type(question) else "")

    def on_emergency_stop(self, msg: Bool) -> None:
        """True: cancel the goals in flight and say so once; robot calls are refused until False."""
        if not self.estop.update(bool(msg.data)):
            if not msg.data:
                self.get_logger().info(f"emergency stop released on {self.estop.topic}")
            return
        self.get_logger().warning(f"emergency stop on {self.estop.topic}: cancelling the goals in flight")
        self._say(self.estop.announcement)
        # the cancels' answers arrive through this node's executor: never wait for them in its callback
        threading.Thread(target=self._cancel_goals, args=("emergency stop",), daemon=True, name="estop-cancel").start()

    def on_node_left(self, node: str, skills: list[str]) -> None:
        """The watchdog saw ``node`` leave the graph while ``skills`` ran: stop them, each call raising a StackFault."""
        self.get_logger().warning(f"the {node} node left the ROS graph while {', '.join(skills)} ran: cancelling the goals in flight")
        threading.Thread(target=self._cancel_goals, args=(f"{node} node gone", partial(motion_fault, node)), daemon=True,
                         name="fault-cancel").start()

    def _cancel_goals(self, why: str, fault: Fault | None = None) -> None:
        try:
            self.skills.cancel_all(fault=fault)
        except Exception as exc:  # noqa: BLE001 - the skill call says what became of the arm; log what failed here
            self.get_logger().error(f"{why}: cancelling the goals in flight failed: {type(exc).__name__}: {exc}")

    def on_objects(self, msg: ObjectList) -> None:
        self._objects = {o.name: [o.pose.position.x, o.pose.position.y, o.pose.position.z] for o in msg.objects}
        self._sizes = {o.name: [o.size.x, o.size.y, o.size.z] for o in msg.objects}
        self._labels = {o.name: o.label for o in msg.objects}
        self._objects_arrived.set()
        with self._object_lists:
            self._lists_seen += 1
            self._object_lists.notify_all()

    def _held(self) -> str:
        """What the hand holds, for the recovery prompt's 'Robot holding:' ('' nothing; the household's states)."""
        return ", ".join(sorted(name for name, (_type, _place, held) in self._things.items() if held))

    def on_states(self, msg: ThingStates) -> None:
        """The household things' states, for get_object_state()."""
        states, places, things = {}, {}, {}
        for t in msg.things:
            things[t.name] = (t.type, t.place, bool(t.held))
            if t.place and not t.held:
                places[t.name] = t.place
            flags: dict[str, Any] = dict(zip(t.state_names, t.state_values))
            if t.contents:
                flags["contents"] = t.contents
            if t.held:
                flags["held"] = True
            states[t.name] = flags
        self._states, self._places, self._things = states, places, things

    def on_improvement_completion(self, msg: LlmCompletion) -> None:
        """The improvement node's calls count towards this episode's tokens and cost."""
        self.core.meter.add("improvement", Completion(
            text=msg.completion, model=msg.model, prompt_digest=msg.prompt_digest, prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens, latency=msg.latency, finish_reason=msg.finish_reason,
            cached_tokens=msg.cached_tokens,
        ))

    def _current_objects(self) -> dict[str, list[float]]:
        # just after start the first list may still be on its way (perception waits for the simulator)
        if self._objects is None and not self._objects_arrived.wait(self.objects_wait):
            raise NotAvailableError(
                f"no object list has arrived on {self.objects_topic}; start the perception (or sim) node"
            )
        return dict(self._objects)

    def _scene(self) -> Scene:
        """The perceived objects with their positions, for the lesson's rehearsal (teachbot.learning.rehearsal)."""
        return scene_from_positions(self._current_objects(), self._labels)

    def list_objects(self) -> list[str]:
        """Names of the objects perception knows about."""
        return sorted(self._current_objects())

    def _ask(self, question: Question) -> None:
        """A question opens: said with its kind and id in the turn's type (the page's buttons send the id back)."""
        if question.open:
            self._say(question.text, question_type(question.kind, question.id))

    def _say(self, text: str, turn: str = "dialog") -> None:
        msg = DialogTurn(speaker="robot", type=turn, text=text)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.robot_pub.publish(msg)

    def _publish_entry(self, episode_id: str, entry: Entry, first_line: int) -> None:
        msg = TranscriptUpdate(episode_id=episode_id, lines=entry.render().split("\n"), first_line=first_line)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.transcript_pub.publish(msg)

    # ------------------------------------------------------------------ services the core uses
    def _retrieve(self, profile: str, instructions: list[str], k: int) -> list[str]:
        if not self.retrieve_client.service_is_ready():
            raise MemoryUnavailable("the memory service memory/retrieve is not running")
        request = RetrieveExamples.Request(profile=profile, instructions=list(reversed(instructions)), k=k)
        try:
            reply = _call(self.retrieve_client, request, RETRIEVE_TIMEOUT, "memory/retrieve")
        except TimeoutError as exc:
            raise MemoryUnavailable(str(exc)) from None
        return [render_example(e) for e in reply.examples]

    def improve(self, request: LearnRequest, timeout: float) -> LearnReply:
        """The core's LearningCall: improvement/improve with the request's deadline."""
        reply = self._improve(request, timeout, False, "learn_from_interaction() is not available: the improvement node "
                                                       "is not running (ros2 run teachbot improvement)")
        return self.lessons.reply(reply)

    def store(self, lesson: InteractionExample, timeout: float) -> LearnReply:
        """The core's LearningCall.store: a lesson the person confirmed, through memory/add."""
        return self.lessons.store(lesson, timeout)

    def keep(self, request: LearnRequest, lesson: InteractionExample, timeout: float) -> LearnReply:
        """The core's LearningCall.keep: a pending lesson, through improvement/keep_lesson."""
        return self.lessons.keep(request, lesson, timeout)

    def distill(self, request: LearnRequest, timeout: float) -> LearnReply:
        """The core's end-of-task distillation: improvement/improve with distill_only."""
        reply = self._improve(request, timeout, True, "no knowledge distilled: the improvement node is not running")
        learned = list(reply.knowledge)
        return LearnReply(bool(learned), ("learned: " + " ".join(learned)) if learned else str(reply.message))

    def _improve(self, request: LearnRequest, timeout: float, distill_only: bool, missing: str) -> Any:
        """One improvement/improve call with the request's deadline (NotAvailableError ``missing`` without the node)."""
        if not self.improve_client.service_is_ready():
            raise NotAvailableError(missing)
        sec = int(request.deadline)
        try:
            return _call(self.improve_client, Improve.Request(
                profile=request.profile, episode_id=request.episode_id, transcript=request.transcript,
                scene_objects=list(request.scene_objects), deadline=Time(sec=sec, nanosec=int((request.deadline - sec) * 1e9)),
                distill_only=distill_only, initial_scene=scene_to_json(request.initial_scene),
                accepted_scene=scene_to_json(request.accepted_scene), **ConfirmedLessons.fields(request),
            ), timeout, "improvement/improve", stop=self._closing.is_set)
        except ServerGone:  # not the TimeoutError the core words as "took too long"
            raise call_fault("improvement", "distillation" if distill_only else "learn_from_interaction()",
                             "it did not finish") from None

    def wait_until_idle(self, timeout: float) -> bool:
        """Wait until the console has finished after the person left (the episode's ending included)."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def session(self) -> Any:
        """The running console episode (tests and the replay harness read its transcript)."""
        return self.core.session

    def close(self) -> None:
        """Stop the console without waiting for the LLM: a call in flight (here or the improvement node's) is
        abandoned, so the console thread ends its episode at once and starts no statement; then the sandbox, the
        watchdog and the clients go."""
        self._closing.set()
        self._abandon.abandon()
        self.core.close()
        self._thread.join(timeout=5.0)  # bounds a hang only: nothing left on the console thread waits for an answer
        self.core.shutdown()
        self.watchdog.close()
        self.skills.close()
        self.issue_client.close()  # an action client left on the node keeps it (and its name) alive on the graph


class ServerGone(TimeoutError):
    """The server of a pending service call left the ROS graph (its node stopped or was killed)."""


def _call(client: Any, request: Any, timeout: float, what: str, stop: Callable[[], bool] | None = None) -> Any:
    """A service call from a non-executor thread, with an overall timeout; a server that leaves the graph
    while the call waits (its node was killed) fails it within about a second, as a TimeoutError too (ServerGone).
    ``stop()`` turning true (the console closing) abandons the wait with ModelAbandoned: the answer is dropped.
    The request carries the current span's context, so the server's span joins this episode's trace."""
    if hasattr(request, "trace_parent"):
        request.trace_parent = trace_parent()
    future = client.call_async(request)
    ended = wait_served(future, timeout, client.service_is_ready, stop=stop)
    if ended == GONE:
        raise ServerGone(f"{what} stopped answering: its node is gone from the ROS graph (it stopped or was killed)")
    if ended == STOPPED:
        raise ModelAbandoned(f"{what}: abandoned in flight, the console is closing")
    if ended != DONE:
        raise TimeoutError(f"{what} did not answer within {timeout:.0f} s")
    return future.result()


class _RemoteKnowledge:
    """KnowledgeSource over memory/retrieve_knowledge, the object's looks from perception/describe_object."""

    def __init__(self, node: InteractionManagerNode) -> None:
        self.node = node

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        client = self.node.knowledge_client
        if not client.service_is_ready():
            raise MemoryUnavailable("the memory service memory/retrieve_knowledge is not running")
        image, image_model = self.node.describe(object_name) if object_name else ([], "")
        request = RetrieveKnowledge.Request(task=task, object_name=object_name, image=image, image_model=image_model,
                                            kind=kind, skill=skill)
        try:
            reply = _call(client, request, RETRIEVE_TIMEOUT, "memory/retrieve_knowledge")
        except TimeoutError as exc:
            raise MemoryUnavailable(str(exc)) from None
        if not reply.success:
            raise MemoryUnavailable(f"memory/retrieve_knowledge failed: {reply.message}")
        return Found(tuple(entries_from_msgs(reply.entries)), str(reply.block), tuple(reply.reasons))


class _LocalKnowledgeBase:
    """The knowledge base opened in this process on first use, with the examples' sentence embedder
    (by name only: this process has no camera)."""

    def __init__(self, examples: LocalExamples) -> None:
        self.examples = examples
        self._source: LocalKnowledge | None = None
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Open the knowledge base now (see InteractionManagerNode._prepare_memory)."""
        self._open()

    def _open(self) -> LocalKnowledge:
        with self._lock:
            if self._source is None:

                memory = self.examples.memory()
                config, images = knowledge_settings()
                store = KnowledgeStore(self.examples.settings().knowledge_path)
                self._source = LocalKnowledge(KnowledgeRetriever(store, memory.embedder, images, config))
            return self._source

    def find(self, task: str, object_name: str = "", kind: str = "", skill: str = "") -> Found:
        return self._open().find(task, object_name, kind, skill)


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot interaction_manager``."""
    return run_nodes([InteractionManagerNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
