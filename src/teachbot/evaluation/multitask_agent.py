"""The robot of the multi-task benchmark: a console per conversation over the in-process household skills,
with the task memory (its store on disk, read anew by every conversation's console) or without it.

Methods: ``memory`` (the paper's worker LLM selects each task's objects and extracts its state from the
logs; one worker per case, so its calls, failures and fallbacks are the case's), ``memory-extractor`` (the
ablation: the deterministic extractor, the judge's own definition of done, makes working memories) and
``no-memory`` (no task-memory functions; the task list stays in the prompt)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from teachbot.console.household_api import HouseholdRobot
from teachbot.console.session import SessionConfig
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.core import ENDED
from teachbot.language.prompts import load_prompt
from teachbot.language.registry import RobotApi
from teachbot.taskmemory import MEMORY_FUNCTIONS, ConsoleTaskMemory, ObjectInfo, TaskMemory, TaskMemoryConfig, WorkerLLM
from teachbot.taskmemory.working import STATE_PROMPT

MAX_STOPS = 3  # consoles that give up by themselves within one conversation before the person leaves


class Agent:
    """One case's robot. ``conversation`` runs the person's current lines on a fresh console: a restart of
    every node, the task memory's logs read back from ``store``."""

    def __init__(self, method: str, models: Any, store: Path, world: Any, recorder: Any, person: Any,
                 environment: Callable[[], Mapping[str, ObjectInfo]], memory_config: TaskMemoryConfig, max_rounds: int) -> None:
        self.method, self.models, self.store, self.world = method, models, store, world
        self.recorder, self.person, self.environment = recorder, person, environment
        self.memory_config, self.max_rounds = memory_config, max_rounds
        self.tokens = 0
        self.worker = (WorkerLLM(models.worker, load_prompt(STATE_PROMPT), memory_config, fallback=models.fallback)
                       if method == "memory" else None)

    def api(self) -> RobotApi:
        api = RobotApi.load("household")
        if self.method == "no-memory":
            return RobotApi(api.profile, tuple(f for f in api.functions if f.name not in MEMORY_FUNCTIONS))
        return api

    def functions(self) -> dict[str, Callable[..., Any]]:
        world = self.world.world
        robot = HouseholdRobot(self.recorder, self.world.object_names, world.thing_states, self.person, world.layout,
                               where=self.world.truth)
        functions = robot.functions()
        if self.method == "no-memory":
            return functions
        memory = TaskMemory(self.store / "tasks", self.memory_config, "household", self.environment, self.worker)
        return ConsoleTaskMemory(memory).wrap(functions)

    def conversation(self, transcripts: list[str]) -> list[str]:
        """Run one conversation to its end; the reasons the console stopped by itself, if it did."""

        api = self.api()
        config = CoreConfig(session=SessionConfig(max_rounds=self.max_rounds), examples_k=0)
        core = InteractionCore(api, self.functions(), self.person, self.models.interaction, config=config,
                               scene_objects=self.world.object_names)
        stops: list[str] = []
        try:
            while True:
                reason = core.run_episode()
                transcripts.append(core.session.transcript.render() if core.session else "")
                if reason == ENDED or not self.person.lines or len(stops) >= MAX_STOPS:
                    break
                stops.append(reason)
        finally:
            used = core.meter.totals()["total"]
            self.tokens += int(used["input_tokens"] + used["output_tokens"])
            core.shutdown()
        return stops
