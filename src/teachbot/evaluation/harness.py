"""One method's runs against the simulated robot: the console, a simulated person, the task's check.

The agent is the interaction core (teachbot.interaction) exactly as the robot runs it, bound to the
tabletop API over a skill client; its memory is the method's own store, read and written in this
process, and learning runs the improvement chain directly. The person is the dialog: every
``wait_for_trigger()`` after the first is a return of control, where the task's check decides the
state and the simulated person ends the run or corrects the robot.

The core paper's protocol (its section 4.1) is the default: an error (the console gave up on errors) or a timeout
ends the run at once; the run's clock is the robot's time in its motions (``SandboxExecutor.robot_seconds``) and the
console's statements (its round limit), never the model's latency, and it never turns a success into a failure; the
person's random draws come from a generator seeded by the run (split, template, run), the same for every method and
on a resume. DEVIATIONS (teachbot.evaluation.sweep) name the old behaviours, off unless a sweep asks for them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from teachbot.config import load_yaml
from teachbot.console.session import SessionConfig
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.evaluation.metrics import Return, RunRecord
from teachbot.evaluation.person import LlmPerson, PersonConfig, Reaction, Situation, TemplatePerson, person_rng
from teachbot.interaction import CoreConfig, InteractionCore, LocalExamples
from teachbot.interaction.core import ENDED
from teachbot.interaction.pending import DISCARDED as UNFINISHED_COUNT
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.language.registry import RobotApi
from teachbot.learning.improver import Improver
from teachbot.learning.learner import Learner, learning_config
from teachbot.learning.rehearsal import KEPT, REJECTED, RehearsalConfig, Rehearser
from teachbot.llm.base import LLMError, Model
from teachbot.llm.pricing import UsageMeter
from teachbot.memory.config import MemoryConfig
from teachbot.memory.episodic import EpisodicMemory
from teachbot.paths import config_path
from teachbot.simrobot.snapshot import scene_from_positions

LEARNING_MODES = ("improve", "store_raw", "off")
# robot functions no part of the evaluation serves (no issue detection node runs in the paper's protocol): left out
# of every prompt, so no model is offered a function that would only answer "not available"
UNBOUND = ("check_action",)
REHEARSE = "rehearse-lessons"  # the deviation (teachbot.evaluation.sweep.DEVIATIONS) that tries lessons before keeping them


@dataclass(frozen=True)
class Method:
    """A way of running the robot: ``kind`` console (ours, with ``k`` retrieved examples and a learning
    mode) or a baseline's kind (teachbot.evaluation.baselines)."""

    name: str
    k: int = 16
    learning: str = "improve"
    description: str = ""
    kind: str = "console"


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("ours", description="console, k=16 retrieved examples, learning from corrections"),
    Method("ours-no-learning", learning="off", description="as ours, learn_from_interaction() stores nothing"),
    Method("ours-no-retrieval", k=64, description="as ours with k=64: (nearly) every example, no selection"),
    Method("ours-no-improve", learning="store_raw", description="as ours, the interaction stored as it was"),
    Method("ours-k4", k=4, description="as ours with k=4"),
    Method("cap", k=0, learning="off", kind="cap",
           description="Code as Policies: the whole program at once from a few-shot prompt; an exception ends the run"),
    Method("dynamic-cap", k=16, learning="store_raw", kind="dynamic-cap",
           description="cap plus the k=16 most similar stored (instruction, program) examples; successful runs stored"),
    Method("helper", k=16, learning="store_raw", kind="helper",
           description="HELPER-style: retrieved successful programs, errors self-reflected (2 tries), feedback a new command"),
)}


@dataclass
class PreparedRun:
    """A scheduled run with its scene set up: what the person says and how the harness judges it."""

    method: str
    split: str
    template: str
    run: int
    instruction: str
    check: Callable[[], tuple[bool, str]]  # (success, diagnosis) from the simulator's ground truth now
    plan: Sequence[str] = ()  # the task's expert statements (for oracle doubles; never shown to the agent)
    world: Callable[[], str] = lambda: ""  # the table in words, for an LLM person
    extra: dict[str, Any] = field(default_factory=dict)


class EvalDialog(DialogChannel):
    """The simulated person as the console's dialog: the instruction first, then a reaction at each return."""

    def __init__(self, person: TemplatePerson | LlmPerson, run_timeout: float, clock: Callable[[], float] | None = None) -> None:
        """``clock``: the run's clock in seconds (the robot's motion time; default the wall clock)."""
        super().__init__(timeout=run_timeout)
        self.person, self.run_timeout = person, run_timeout
        self.clock = clock or time.monotonic
        self.run: PreparedRun | None = None
        self.returns: list[Return] = []
        self.pending = ""  # what the person says when the next episode of this run starts
        self.over = False
        self._started = 0.0
        self._closing = False

    def start(self, run: PreparedRun) -> None:
        self.run, self.returns, self.said = run, [], []
        self.pending, self.over, self._closing = run.instruction, False, False
        self._started = self.clock()
        self.person.rng = person_rng(run.split, run.template, run.run, run.extra.get("seed", 0))

    @property
    def elapsed(self) -> float:
        """The run's time so far on its clock."""
        return self.clock() - self._started

    def wait_for_trigger(self) -> dict:
        if self.pending:  # the console's own first wait_for_trigger() of an episode
            text, self.pending = self.pending, ""
            return {"type": "dialog", "text": text}
        if self.over or self._closing:
            self.over = True
            raise SessionEnded("the run is over")
        state = "timeout" if self.elapsed > self.run_timeout else None
        reaction = self.react(state)
        if reaction.ends_run and not reaction.utterance:
            self.over = True
            raise SessionEnded("the run is over")
        self._closing = reaction.ends_run
        return {"type": "dialog", "text": reaction.utterance}

    def ask(self, question: str) -> dict:
        """The person answers the robot's question from what they see (the task's diagnosis now): which object,
        where, which way. An answer is not a return of control: it records no return."""
        self.say(question)
        assert self.run is not None
        return {"type": "dialog", "text": self.person.answer(question, self._situation(*self.run.check()))}

    def _situation(self, success: bool, diagnosis: str) -> Situation:
        """What the person knows now: the request, whether it is done, what is still wrong, what the robot said."""
        assert self.run is not None
        return Situation(self.run.instruction, success, diagnosis, len(self.returns), world=self.run.world(),
                         robot_words=tuple(self.said))

    def react(self, state: str | None) -> Reaction:
        """Judge the world, record the return, and let the person react (``state`` forces error/timeout)."""
        assert self.run is not None
        success, diagnosis = self.run.check()
        final = "success" if success else (state or "failure")  # the task done is a success, whenever the clock says
        reaction = self.person.react(self._situation(final == "success", diagnosis))
        if final != "success" and state == "timeout":
            reaction = Reaction(reaction.utterance, ends_run=True)  # out of time: no more attempts
        self.returns.append(Return(final, reaction.utterance))
        return reaction


@dataclass(frozen=True)
class AgentModels:
    interaction: Model
    function_generation: Model | None
    improvement: Model
    person: Model | None = None


def robot_budget() -> dict[str, int]:
    """The robot's token budget (config/interaction.yaml: context_tokens, reserve_tokens): an evaluated prompt is
    trimmed as a deployed one is, so a run never sends what the robot's model could not take."""
    robot = CoreConfig.from_config(load_yaml(config_path("interaction.yaml"))["interaction"])
    return {"context_tokens": robot.context_tokens, "reserve_tokens": robot.reserve_tokens}


def usage_meter(models: AgentModels) -> UsageMeter:
    """A meter of every call of a method's models, across its runs and episodes (reset per run)."""
    usage = UsageMeter()
    for role, model in (("interaction", models.interaction), ("function_generation", models.function_generation),
                        ("improvement", models.improvement), ("person", models.person)):
        add = getattr(model, "add_listener", None)
        if add is not None:
            add(lambda completion, _prompt, role=role: usage.add(role, completion))
    return usage


def run_record(prepared: PreparedRun, returns: Sequence[Return], usage: UsageMeter, started: float,
               transcript: str) -> RunRecord:
    """The results.jsonl line of a finished run: its returns, tokens and cost since ``usage.reset()``."""
    total = usage.totals()["total"]
    return RunRecord(prepared.method, prepared.split, prepared.template, prepared.run, prepared.instruction,
                     tuple(returns), tokens=total["input_tokens"] + total["output_tokens"],
                     cost_usd=round(total["cost"], 6), wall_s=round(time.monotonic() - started, 3),
                     extra={**prepared.extra, "transcript": transcript})


class ConsoleAgent:
    """The robot's console for one method: its own learned store, kept across all of its runs."""

    def __init__(self, method: Method, store: Path, models: AgentModels, skills: Any, objects: Callable[[], dict],
                 *, person: PersonConfig, seed: int, run_timeout: float = 300.0, session: SessionConfig | None = None,
                 memory_config: Any = None, embedder: Any = None, deviations: Sequence[str] = (),
                 rehearse: bool | None = None) -> None:
        """``deviations``: names of teachbot.evaluation.sweep.DEVIATIONS to apply (none: the paper's protocol).
        ``rehearse``: try each lesson in a copy of the world before storing it (teachbot.learning.rehearsal; None: as
        the ``rehearse-lessons`` deviation says, off in the paper's protocol); the lesson then waits until the simulated
        person accepts the task (teachbot.interaction.pending: their praise, or ending the run at a success) and each
        run's record says how many lessons were kept, rejected and discarded unfinished."""
        if method.learning not in LEARNING_MODES:
            raise ValueError(f"learning mode of {method.name} is one of {', '.join(LEARNING_MODES)}")
        self.method, self.models = method, models
        self.deviations = frozenset(deviations)
        self.usage = usage_meter(models)
        settings = dataclasses.replace(memory_config or MemoryConfig.load(), learned_dir=Path(store).resolve())
        self.memory = EpisodicMemory.open(settings, embedder=embedder)
        rng = np.random.default_rng(seed)
        who = LlmPerson(person, models.person, rng) if person.kind == "llm" and models.person else TemplatePerson(person, rng)
        wall = "wall-clock-timeout" in self.deviations
        self.dialog = EvalDialog(who, run_timeout, clock=None if wall else (lambda: self.core.sandbox.robot_seconds))
        api = RobotApi.load("tabletop").without(UNBOUND)
        robot = TabletopRobot(skills, objects, self.dialog)
        self.learner = Learner.in_process(Improver(models.improvement, api, method.learning), self.memory,
                                          rehearsal=_rehearser(REHEARSE in self.deviations if rehearse is None else rehearse))
        self.core = InteractionCore(
            api, robot.functions(), self.dialog, models.interaction, function_model=models.function_generation,
            examples=LocalExamples(memory=self.memory),
            config=CoreConfig(session=session or SessionConfig(), examples_k=method.k, **robot_budget()),
            learner=self.learner,
            scene_objects=lambda: sorted(objects()), on_kill=getattr(skills, "cancel_all", None),
            scene_state=lambda: scene_from_positions(objects()),
            satisfied=self._satisfied,
        )

    def _satisfied(self) -> bool:
        """Whether the simulated person, having ended the run, accepted the table: they end it both at a success
        and when they give up (out of corrections or time); their last return says which."""
        return bool(self.dialog.returns) and self.dialog.returns[-1].state == "success"
    def run(self, prepared: PreparedRun) -> RunRecord:
        """One run: episodes until the person ends it (a console that gives up is a return of error/timeout)."""
        self.dialog.start(prepared)
        self.usage.reset()
        started = time.monotonic()
        tried, settled = dict(self.learner.rehearsals), dict(self.core.pending.counts)
        while not self.dialog.over:
            reason = self.core.run_episode()
            error = self.core.llm_error if reason.startswith("LLM unavailable") else None
            if error is not None and error.status == 400:
                # this run's request was refused (too long, a content filter): the run's error, and the sweep goes on,
                # since running it again would be refused again
                prepared.extra["error"] = f"the endpoint refused this run's request: {error}"
                self.dialog.returns.append(Return("error", ""))
                break
            if reason.startswith("LLM unavailable"):
                # not the robot's doing: stop the sweep, record nothing; the same command resumes at this run
                raise LLMError(f"{reason.removeprefix('LLM unavailable: ')} (the sweep stopped at {prepared.method} "
                               f"{prepared.split} {prepared.template} run {prepared.run}; run the same command again "
                               "to resume)")
            if reason == ENDED or self.dialog.over:
                break
            # the console stopped by itself (errors, round limit): the paper ends the run here
            state = "timeout" if reason.startswith(("reached the limit", "nobody spoke")) else "error"
            reaction = self.dialog.react(state)
            if reaction.ends_run or "continue-after-errors" not in self.deviations:
                break
            self.dialog.pending = reaction.utterance  # the next episode begins with the correction
        transcript = self.core.session.transcript.render() if self.core.session else ""
        for verdict in (KEPT, REJECTED):  # this run's lessons tried in a copy of the world: kept, rejected
            prepared.extra[f"rehearsal_{verdict}"] = self.learner.rehearsals[verdict] - tried.get(verdict, 0)
        # and those that waited for the person, who never accepted the corrected task
        prepared.extra["rehearsal_unfinished"] = self.core.pending.counts[UNFINISHED_COUNT] - settled.get(UNFINISHED_COUNT, 0)
        return run_record(prepared, self.dialog.returns, self.usage, started, transcript)

    def close(self) -> None:
        self.core.shutdown()


def _rehearser(rehearse: bool | None) -> Rehearser:
    """The lessons' rehearsal on the tabletop (config/learning.yaml ``rehearsal``, ``rehearse`` overriding enabled)."""
    config = RehearsalConfig.from_config(learning_config().get("rehearsal"))
    if rehearse is not None:
        config = dataclasses.replace(config, enabled=rehearse)
    return Rehearser({"tabletop": lambda skills, objects, dialog: TabletopRobot(skills, objects, dialog).functions()}, config)
