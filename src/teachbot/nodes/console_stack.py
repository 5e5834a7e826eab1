"""The whole console stack in one process around given LLMs and a scripted person: what recordings are
made with (tools/make_test_bags.py, ``teachbot record``) and what a replay rebuilds.

sim + skills (InProcessStack), then the recorder, memory (seed examples + a learned store in a
working directory, never the user's) and improvement nodes, then the interaction manager last: its
first prompt is built the moment it starts, and the memory service must already be there for that
prompt to hold the retrieved examples in every run.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import queue
import re
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import rclpy
from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate

from teachbot.llm.base import Model
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.nodes.common import COMMAND_QOS
from teachbot.nodes.improvement_node import ImprovementNode
from teachbot.nodes.interaction_manager_node import TRANSCRIPT_QOS, InteractionManagerNode
from teachbot.nodes.memory_node import MemoryNode
from teachbot.nodes.nodeset import node_set
from teachbot.nodes.session_recording import Recording, start_recording
from teachbot.nodes.stack import InProcessStack
from teachbot.recording.bag import SESSION_END, SessionSpec
from teachbot.robot_profile import RobotProfile

_WAITS = re.compile(r"\b(wait_for_trigger|ask)\s*\(")


def default_cache_dir() -> Path:
    """Where replays keep sentence embeddings (by model and text digest; shared, never the memory store)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "teachbot" / "embeddings"


def waits_for_person(line: str) -> bool:
    """Whether a transcript line is a statement that blocks on the person (wait_for_trigger/ask)."""
    if not line.startswith(">>> "):
        return False
    source = line[4:]
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return bool(_WAITS.search(source))
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("wait_for_trigger", "ask")
               for n in ast.walk(tree))


class ScriptedPerson:
    """A person who answers each wait_for_trigger()/ask() of the transcript topic with the next utterance
    on dialog/user, and leaves when none is left. Also collects the transcript.

    Shared by the in-process replay (ConsoleStack, whose ``leave`` closes the console's dialog) and the
    replay node (teachbot.nodes.replay_node, which plays the person over ROS). ``prepare`` runs once on
    the speaking thread before the first utterance (the replay node restores the recorded scene there).
    ``left`` is set when the person ran out of utterances, ``finished`` when the console ended the session.
    """

    def __init__(self, node: Any, utterances: Sequence[str], leave: Callable[[], None],
                 on_line: Callable[[str], None] | None = None, prepare: Callable[[], None] | None = None) -> None:
        self.node = node
        self.utterances = list(utterances)
        self.leave = leave
        self.on_line = on_line or (lambda _line: None)
        self.prepare = prepare
        self.episodes: dict[str, dict[int, str]] = {}
        self.answered = 0
        self.left = threading.Event()
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._turn = DialogTurn
        self._pub = node.create_publisher(DialogTurn, "dialog/user", COMMAND_QOS)
        self._jobs: queue.Queue[str | None] = queue.Queue()
        node.create_subscription(TranscriptUpdate, "interaction/transcript", self._on_transcript, TRANSCRIPT_QOS)
        self._worker = threading.Thread(target=self._speak, daemon=True, name="scripted-person")
        self._worker.start()

    def _on_transcript(self, msg: Any) -> None:
        with self._lock:  # other threads read the transcript while it grows
            lines = self.episodes.setdefault(msg.episode_id, {})
            for offset, line in enumerate(msg.lines):
                lines[msg.first_line + offset] = line
        for line in msg.lines:
            self.on_line(line)
            if waits_for_person(line):
                self._jobs.put("speak")
            elif line.startswith(SESSION_END):
                self.finished.set()

    def _speak(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self.prepare is not None:
                prepare, self.prepare = self.prepare, None
                prepare()
            if self.answered < len(self.utterances):
                text = self.utterances[self.answered]
                self.answered += 1
                while self._pub.get_subscription_count() == 0 and not self.finished.is_set():
                    self.finished.wait(0.01)
                msg = self._turn(speaker="user", type="dialog", text=text)
                msg.header.stamp = self.node.get_clock().now().to_msg()
                self._pub.publish(msg)
            else:
                self.left.set()
                self.leave()
            del job

    @property
    def transcript(self) -> list[str]:
        """Every line seen so far, episode after episode."""
        with self._lock:
            return [episode[i] for episode in self.episodes.values() for i in sorted(episode)]

    def close(self) -> None:
        """Stop the worker thread."""
        self._jobs.put(None)
        self._worker.join(timeout=2.0)


class ConsoleStack:
    """Start with :meth:`start`, run one conversation with :meth:`converse`, end with :meth:`stop`."""

    def __init__(
        self,
        spec: SessionSpec,
        *,
        interaction_model: Model,
        function_model: Model,
        improvement_model: Model | None = None,
        correction_model: Model | None = None,
        real_time_factor: float | None = None,
        camera: bool = False,
        camera_rate: float = 2.0,
        cache_dir: Path | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.spec = spec
        self.models = {"interaction": interaction_model, "function_generation": function_model,
                       "improvement": improvement_model, "correction": correction_model}
        self.real_time_factor = spec.real_time_factor if real_time_factor is None else real_time_factor
        self.camera, self.camera_rate = camera, camera_rate
        self.cache_dir = cache_dir or default_cache_dir()
        self._tmp = tempfile.TemporaryDirectory(prefix="teachbot-session-") if workdir is None else None
        self.workdir = Path(self._tmp.name) if self._tmp else Path(workdir)
        self.stack: Any = None
        self.recording: Recording | None = None
        self.interaction_manager: Any = None
        self.person: ScriptedPerson | None = None
        self.memory: Any = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Any:
        """sim + skills up, in the recorded scene; returns the skill client."""

        overrides: dict[str, Any] = {"real_time_factor": self.real_time_factor, "camera_enabled": self.camera}
        if self.camera:
            overrides["camera_rate"] = self.camera_rate
        if self.spec.seed is not None:
            overrides["seed"] = self.spec.seed
        elif self.spec.scene_yaml:
            scene = self.workdir / "scene.yaml"
            scene.write_text(self.spec.scene_yaml)
            overrides["scene_file"] = str(scene)
        if self.spec.memory:
            self.memory = self._open_memory()
        if RobotProfile.load(self.spec.robot_profile).world == "household":
            # the household console reads perception's object list and states (ground truth, see
            # config/perception_household.yaml); the tabletop console's skills read the simulator's
            specs = node_set("sim", {"robot_profile": self.spec.robot_profile}, only=("sim", "skills", "perception"),
                             extra_parameters={"sim": overrides})
            self.stack = InProcessStack.from_node_set(specs)
        else:
            self.stack = InProcessStack(self.spec.robot_profile, **overrides)
        return self.stack.start()

    def _open_memory(self) -> Any:
        """The seed examples and a fresh learned store, with the embedding model loaded: before the
        simulator starts, whose physics thread at real_time_factor 0 would slow these imports tenfold."""

        # the configured seeds, model and retrieval; a fresh learned store and a shared vector cache
        config = dataclasses.replace(MemoryConfig.load(), learned_dir=self.workdir / "learned", cache_dir=self.cache_dir)
        memory = EpisodicMemory.open(config)
        memory.warm_up()
        return memory

    def record(self, path: str | Path, storage: str = "mcap", camera: bool = False) -> Recording:
        """Record from now on (call before :meth:`start_console`)."""
        self.recording = start_recording(self.stack, path, spec=self.spec, storage=storage, camera=camera)
        return self.recording

    def start_console(self) -> Any:
        """Memory and improvement nodes (when the spec has them), then the interaction manager."""

        if self.spec.memory:
            self.memory = self.memory or self._open_memory()
            self.stack.add_node(MemoryNode(self.memory))
            improvement = ImprovementNode(model=self.models["improvement"], mode=self.spec.learning_mode) \
                if self.models["improvement"] is not None else ImprovementNode(mode=self.spec.learning_mode)
            self.stack.add_node(improvement)
        # the console's own fallback for retrieval reads the same (temporary) store, never the user's
        local = {"memory": str(self.memory.store.learned_dir)} if self.memory is not None else {}
        self.interaction_manager = InteractionManagerNode(
            interaction_model=self.models["interaction"], function_model=self.models["function_generation"],
            correction_model=self.models["correction"], **local, **self.spec.interaction)
        self.stack.add_node(self.interaction_manager)
        return self.interaction_manager

    def converse(self, utterances: Sequence[str], on_line: Callable[[str], None] | None = None) -> ScriptedPerson:
        """A scripted person joins (before the console starts, so the first prompt is answered the same way)."""

        node = rclpy.create_node("person")
        self.stack.add_node(node)
        self.person = ScriptedPerson(node, utterances, leave=lambda: self.interaction_manager.dialog.close(), on_line=on_line)
        return self.person

    def stop(self) -> None:
        """Finish the recording, stop every node, remove the working directory."""
        if self.recording is not None:
            self.recording.stop()
        if self.person is not None:
            self.person.close()
        if self.stack is not None:
            self.stack.stop()
            self.stack = None
        if self._tmp is not None:
            self._tmp.cleanup()


def run_conversation(console: ConsoleStack, utterances: Sequence[str], *, timeout: float = 300.0,
                     on_line: Callable[[str], None] | None = None, abort: threading.Event | None = None) -> ScriptedPerson:
    """The person joins, the console starts, and they talk until the person has left (or ``abort``/timeout)."""
    person = console.converse(utterances, on_line)
    console.start_console()
    stop = abort or threading.Event()
    deadline = timeout
    while not person.finished.is_set() and not stop.is_set() and deadline > 0:
        person.finished.wait(0.05)
        deadline -= 0.05
    if person.finished.is_set() and not stop.is_set():
        # the episode's own ending (knowledge distilled from its corrections) belongs to the session too
        console.interaction_manager.wait_until_idle(max(deadline, 1.0))
    return person
