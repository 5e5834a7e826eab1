"""DROC's evaluation (its Fig. 2): corrections per iteration, DROC against its ablations and Code as Policies.

Protocol. Per method, the tasks of config/benchmarks/droc/ in the config's order (the plan-level train ->
test pairs of the paper's Table II, config/benchmarks/droc/plan_level.yaml, are two iterations: the train
task, then the test task) and, per task, its iterations 1..N in order, each presenting its variants (teach;
same and similar; dissimilar) one episode each. An episode: the variant's scene is loaded, the person says the instruction and the console
(teachbot.interaction.InteractionCore, in-process, on the simulated robot's skills) acts. At every return
of control (``wait_for_trigger()``) the person judges the simulator's ground truth with
:meth:`DrocTask.correction`: '' ends the episode as a success; else the sentence is the correction, at most
``max_corrections`` of them, after which the episode counts as failed. Before a retry the person puts the
scene back as it was before the robot first called the task's skill (the variant's scene is reloaded and
the robot's successful calls before that one replayed): a knocked-over jar is stood up again, a mug put
down in the wrong spot is back in the hand, the wrong cup back on the counter. Skill-level corrections go
through the correction handler, which re-runs the call; plan-level ones make the interaction model replan.

Knowledge. Each method that keeps knowledge has ONE store (``OUT/knowledge/<method>``) kept across the
iterations of a task and, by default (``shared_store``), across the tasks too, as DROC's knowledge base
is: what the jars taught is there when the mugs come. ``shared_store=False`` (``--store per-task``)
empties it when a task's sequence starts. Knowledge is distilled at the end of each episode with
corrections (the extractor: its skill prompt after each corrected skill, then its plan prompt), each
entry with the crop descriptor (classic colour + depth) of the thing it names, as the robot's camera sees it
in the variant's scene and cut out as ``perception/describe_object`` cuts it, by box and depth, without
segmentation ids (``DrocWorlds.crop``: the tabletop's fixed scene camera and the detector's box; the
household's mast camera from where the skills stand at the thing's place); retrieval compares the crop of
the thing a request or a call names (a place_object call names the table, so its knowledge is keyed by the
table's looks). An episode cut short after its distillation keeps what it stored when the run resumes.

Methods (``METHODS``):

- ``droc``: the two-step correction handler (what the correction depends on, from its words alone; then
  the solution from that history only) + knowledge; retrieval by task text and by the looks of the
  object's crop.
- ``droc-full-history``: the paper's Ours-E: as droc, but one handler call sees the whole interaction
  history (no selection of the relevant context) and also says what the correction depends on.
- ``droc-no-prior``: the store emptied before every episode: nothing carries over.
- ``droc-retrieve-all``: every stored entry shown and every learned parameter of a skill applied (newest
  wins), whatever the task or the object: the retrieval's selection switched off. (Its old name,
  ``droc-all-history``, is still read, with a deprecation warning: it never was the paper's Ours-E.)
- ``droc-no-visual``: retrieval without images: an object matched by its name and the task's text only.
- ``ours-r``: the paper's Ours-R (its plan-level baseline): nothing distilled; the plan that did each earlier
  request is kept (``droc_sources.SavedPlans``) and the one of the most similar request by text is shown.
- ``droc-rule-skills``: the ablation of the extractor's skill level: skill knowledge by rule from the values
  the re-run calls wrote (``knowledge.extraction.rule_skill_knowledge``), no skill prompt; the others run
  the extractor's skill prompt after each corrected skill, as deployed (the same ``KnowledgeExtractor``).
- ``cap``: Code as Policies: no handler, no knowledge; the correction is a new instruction to the
  interaction model, which writes the next statement itself.

Trials: ``trials`` runs of the whole protocol, trial k with the doubles' seed k (their imperfect
understanding, ``noise``: teachbot.evaluation.droc_doubles.Understanding, one level for every method) and
stores of its own (trial 0 in ``OUT/knowledge/<method>``, trial k in ``OUT/knowledge/trial-<k>/<method>``).

Results: one line per (trial, method, task, iteration, variant) in ``results.jsonl`` (an existing line is
skipped when the same command runs again; the stores on disk carry on), with the handler's raw answers of
both steps per correction (``handler``), the extraction model's raw answers (``extractor``) and those of
them it could not use (``extractor_unread``: which prompt, the answer, why; counted in the report); with
``looks``, one line per trial in ``looks.jsonl``: the upright/flipped retrieval of mesh cups
(teachbot.evaluation.droc_looks); then ``summary.json`` and ``report.md`` (:func:`write_summary`: mean ±
standard error over the trials).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.console.household_api import HouseholdRobot
from teachbot.console.session import SessionConfig
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.errors import ConfigError
from teachbot.evaluation.droc_doubles import CorrectionDouble, InteractionDouble, Understanding
from teachbot.evaluation.droc_extraction_double import ExtractionDouble
from teachbot.evaluation.droc_looks import upright_flipped
from teachbot.evaluation.droc_report import (  # noqa: F401 - read_results, summarise, format_table, write_summary: here too
    LOOKS,
    RENAMED,
    RESULTS,
    SETTINGS,
    format_table,
    method_name,
    read_looks,
    read_results,
    summarise,
    write_summary,
)
from teachbot.evaluation.droc_request import Guess
from teachbot.evaluation.droc_select_double import SelectionDouble
from teachbot.evaluation.droc_sources import AllHistory, AllHistoryKnowledge, RecordingHandler, SavedPlans, plan_that_worked
from teachbot.evaluation.droc_tasks import DrocTask, Variant, load_tasks
from teachbot.evaluation.droc_worlds import DrocWorlds
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.core import ENDED
from teachbot.interaction.knowledge import ConsoleKnowledge, LocalKnowledge
from teachbot.knowledge import (
    ColourDepthDescriptor,
    CorrectionConfig,
    ExtractionConfig,
    KnowledgeConfig,
    KnowledgeExtractor,
    KnowledgeRetriever,
    KnowledgeStore,
)
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import Transcript
from teachbot.learning.improver import Improver
from teachbot.learning.learner import Learner
from teachbot.llm.scripted import ScriptedModel
from teachbot.memory import SentenceTransformerEmbedder
from teachbot.simrobot.direct import DirectSkills
from teachbot.skills.parameters import NAMES_FIELD, VALUES_FIELD, SkillParameters
from teachbot.tracing import evaluation_run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DrocMethod:
    """``knowledge``: 'retrieval' (text + looks), 'no-visual', 'all', 'plans' (Ours-R: saved plans, no distillation)
    or '' (none); ``prior``: kept across episodes;
    ``history_selection``: the handler's two steps (False: one call with the whole history, Ours-E)."""

    name: str
    handler: bool = True
    knowledge: str = "retrieval"
    prior: bool = True
    description: str = ""
    history_selection: bool = True
    rule_skills: bool = False  # the ablation: skill knowledge by rule from the re-run calls, not the extractor's skill prompt


METHODS: dict[str, DrocMethod] = {m.name: m for m in (
    DrocMethod("droc", description="two-step correction handler + knowledge retrieved by task text and the object's looks"),
    DrocMethod("droc-full-history", history_selection=False,
               description="Ours-E: as droc, one handler call sees the whole history and says the dependence itself"),
    DrocMethod("droc-no-prior", prior=False, description="as droc, the knowledge store emptied before every episode"),
    DrocMethod("droc-retrieve-all", knowledge="all", description="as droc, every entry shown and every learned parameter applied"),
    DrocMethod("droc-no-visual", knowledge="no-visual", description="as droc, objects matched by name and task text only"),
    DrocMethod("ours-r", knowledge="plans",
               description="Ours-R: no distillation; the plan that worked for the most similar earlier request is shown"),
    DrocMethod("droc-rule-skills", rule_skills=True,
               description="ablation: as droc, skill knowledge by rule from the re-run calls' values, not the LLM extractor"),
    DrocMethod("cap", handler=False, knowledge="", prior=False,
               description="Code as Policies: the correction is a new instruction to the interaction model"),
)}
@dataclass(frozen=True)
class DrocModels:
    """The models of a run: ``interaction`` (droc methods), ``cap`` (the baseline's interaction model),
    ``correction`` (the handler's) and ``extraction`` (the extractor's; None: skill entries by rule only).
    ``fresh(noise, seed)``: new models of the same kind for one trial and method (the doubles: their
    understanding's noise and seed); None: these models serve every trial and method."""

    interaction: Any
    cap: Any
    correction: Any
    extraction: Any = None
    label: str = "doubles"
    fresh: Callable[[float, int], DrocModels] | None = None
    selection: Any = None  # the retrieval's task selection (prompts/droc_select_tasks.txt); None: by text similarity

    def for_trial(self, noise: float, seed: int) -> DrocModels:
        """The models of one trial and method."""
        return self.fresh(noise, seed) if self.fresh is not None else self

    def begin_draw(self, key: str) -> None:
        """Tell every model that reads with an imperfect understanding which episode it plays next."""
        for model in {id(m): m for m in (self.interaction, self.cap, self.correction, self.extraction, self.selection)}.values():
            if hasattr(model, "begin_draw"):
                model.begin_draw(key)


def double_models(noise: float = 0.0, seed: int = 0, guess: Guess | None = None) -> DrocModels:
    """The offline stand-ins (teachbot.evaluation.droc_doubles), each reading with ``Understanding(noise, seed)``;
    ``guess``: how the interaction doubles pick among things a request fits alike (None: drawn from the seed)."""
    return DrocModels(InteractionDouble(understanding=Understanding(noise, seed), guess=guess),
                      InteractionDouble(cap=True, understanding=Understanding(noise, seed), guess=guess),
                      CorrectionDouble(Understanding(noise, seed)), ExtractionDouble(Understanding(noise, seed)), "doubles",
                      fresh=lambda n, k: double_models(n, k, guess), selection=SelectionDouble(Understanding(noise, seed)))


# ---------------------------------------------------------------------------------------- the person
class Recorder:
    """The robot's skill calls through an in-process skill library: recorded, so that the person can
    put the scene back before a retry (``reset``) and judge with the parameters the robot used."""

    def __init__(self, worlds: DrocWorlds, task: DrocTask, variant: Variant) -> None:
        self.worlds, self.task, self.variant = worlds, task, variant
        self.inner = DirectSkills(worlds.skills(task.world))
        self.calls: list[tuple[str, dict[str, Any], bool]] = []

    def call(self, name: str, timeout: float = 60.0, **fields: Any) -> Any:
        outcome = self.inner.call(name, timeout, **fields)
        self.calls.append((name, dict(fields), bool(outcome.success)))
        return outcome

    def params(self) -> dict[str, float] | None:
        """The parameters of the robot's last call of the task's skill (None: it made none)."""
        for name, fields, _ in reversed(self.calls):
            if name == self.task.skill:
                return dict(zip(fields.get(NAMES_FIELD, ()), fields.get(VALUES_FIELD, ())))
        return None

    def reset(self) -> None:
        """The scene as it was before the robot first called the task's skill (its successful calls before
        that replayed: the mug is back in the hand, the jars stand, the wrong cup is back on the counter)."""
        first = next((i for i, (name, _, _) in enumerate(self.calls) if name == self.task.skill), len(self.calls))
        prefix = [c for c in self.calls[:first] if c[2]]
        self.worlds.load(self.task, self.variant)
        for name, fields, _ in prefix:
            self.inner.call(name, **fields)
        self.calls = list(prefix)


class DrocPerson(DialogChannel):
    """The simulated person of one episode: says the instruction, then judges every return of control."""

    def __init__(self, worlds: DrocWorlds, task: DrocTask, variant: Variant, recorder: Recorder, max_corrections: int) -> None:
        super().__init__(timeout=5.0)
        self.worlds, self.task, self.variant, self.recorder = worlds, task, variant, recorder
        self.max_corrections = max_corrections
        self.before = worlds.truth(task.world)
        self.pending = variant.instruction
        self.said: list[str] = []
        self.success = False
        self.over = False
        self.shown = ""  # the knowledge block the console showed for the request
        self.block: Callable[[], str] = lambda: ""

    def judge(self) -> str:
        """The person's sentence for the world now ('' when the task is done)."""
        return self.task.correction(self.variant, self.before, self.worlds.truth(self.task.world), self.recorder.params(),
                                    choice=len(self.said))

    def react(self) -> str:
        """Judge; the correction to say, or '' when the episode is over (done, or out of corrections)."""
        if not self.said and not self.shown:
            self.shown = self.block()
        sentence = self.judge()
        if not sentence:
            self.success, self.over = True, True
            return ""
        if len(self.said) >= self.max_corrections:
            self.over = True
            return ""
        self.said.append(sentence)
        self.recorder.reset()
        return sentence

    def wait_for_trigger(self) -> dict:
        if self.pending:
            text, self.pending = self.pending, ""
            return {"type": "dialog", "text": text}
        sentence = "" if self.over else self.react()
        if not sentence:
            raise SessionEnded("the person is done")
        return {"type": "dialog", "text": sentence}

    def ask(self, question: str) -> dict:
        """The person answers from what they want (``DrocTask.answer``: the ground truth); not a correction."""
        self.say(question)
        return {"type": "dialog", "text": self.task.answer(self.variant, question)}


class MethodAgent:
    """One method's robot: its knowledge store and retriever, and an episode runner."""

    def __init__(self, method: DrocMethod, models: DrocModels, store_dir: Path, text_embedder: Any, descriptor: Any,
                 retrieval: str = "paper", inject: bool = False) -> None:
        self.method, self.models, self.descriptor, self.inject = method, models, descriptor, inject
        old = next((store_dir.with_name(o) for o, n in RENAMED.items() if n == method.name), None)
        if method.knowledge and old is not None and old.is_dir() and not store_dir.exists():
            log.warning("DROC: the knowledge store %s of the renamed method moves to %s", old, store_dir)
            old.rename(store_dir)
        self.store = KnowledgeStore(store_dir) if method.knowledge and method.knowledge != "plans" else None
        self.plans = SavedPlans(store_dir / "plans.jsonl", text_embedder, KnowledgeConfig.load().text_threshold) \
            if method.knowledge == "plans" else None
        config = dataclasses.replace(KnowledgeConfig.load(), order=retrieval, select_enabled=models.selection is not None)
        self.retriever = KnowledgeRetriever(self.store, text_embedder, descriptor, config, select_model=models.selection) \
            if self.store is not None else None
        self.images: dict[str, Any] = {}
        self.extracted: list[dict[str, Any]] = []  # the extraction model's raw answers in this episode
        self.selected: list[dict[str, Any]] = []  # the task selection model's raw answers in this episode
        for model, answers in ((models.extraction, self.extracted), (models.selection, self.selected)):
            if model is not None and hasattr(model, "add_listener") and model is not models.correction:
                model.add_listener(lambda completion, prompt, answers=answers: answers.append(
                    {"prompt_digest": completion.prompt_digest, "raw": completion.text}))

    def forget_all(self) -> None:
        if self.plans is not None:
            self.plans.clear()
        if self.store is not None:
            for entry in self.store.list():
                self.store.remove(entry.id)

    def episode(self, worlds: DrocWorlds, task: DrocTask, variant: Variant, max_corrections: int, draw: str = "") -> dict[str, Any]:
        """Run one episode of ``variant``; its results line (without the method/iteration keys). ``draw``: the
        episode's key for the models' imperfect understanding (the same for every method)."""

        started = time.monotonic()
        self.extracted.clear()
        self.selected.clear()
        self.models.begin_draw(draw)
        if not self.method.prior:
            self.forget_all()
        self.images = object_images(worlds, task, variant, self.descriptor)
        world = worlds.load(task, variant)
        recorder = Recorder(worlds, task, variant)
        person = DrocPerson(worlds, task, variant, recorder, max_corrections)
        api = RobotApi.load(task.world)
        parameters = SkillParameters.load(task.world, world.profile)
        # the household's furniture too: "open the cupboard" names the thing its knowledge is about
        names = (lambda: [*world.object_names(), *world.layout.places]) if task.world == "household" else \
            (lambda: [o.name for o in world.objects()])
        functions = robot_functions(task, world, recorder, person)
        model = self.models.interaction if self.method.handler else self.models.cap
        logs: list[str] = []
        knowledge = learner = handler = extractor = None
        if self.store is not None:
            looks = self.method.knowledge == "retrieval"
            source = AllHistory(self.store) if self.method.knowledge == "all" else \
                LocalKnowledge(self.retriever, self.images.get if looks else None)
            knowledge = (AllHistoryKnowledge if self.method.knowledge == "all" else ConsoleKnowledge)(
                source, parameters.declared, logs.append, inject=self.inject)
            extraction = ExtractionConfig.load()
            extraction = dataclasses.replace(extraction, rule_skill_knowledge=extraction.rule_skill_knowledge or self.method.rule_skills)
            extractor = KnowledgeExtractor(self.models.extraction, api, parameters, extraction)
            learner = Learner.in_process(Improver(ScriptedModel([], name="improvement:none"), api, "off"),
                                         extractor=extractor, knowledge=self.store, image_of=self._image_with_name)
        elif self.plans is not None:
            knowledge = ConsoleKnowledge(self.plans, parameters.declared, logs.append, inject=self.inject)
        if self.method.handler:
            config = dataclasses.replace(CorrectionConfig.load(), history_selection=self.method.history_selection)
            handler = RecordingHandler(self.models.correction, api, parameters, config, object_size=lambda n: _size(worlds, task, n))
        rounds = 12 + 8 * max_corrections
        core = InteractionCore(api, functions, person, model, config=CoreConfig(session=SessionConfig(max_rounds=rounds), examples_k=0),
                               learner=learner, scene_objects=names, knowledge=knowledge, corrections=handler, log=logs.append)
        person.block = lambda: core.prompts.last_block
        stops, transcripts, tokens, cost = [], [], 0, 0.0
        try:
            while True:
                reason = core.run_episode()
                transcripts.append(core.session.transcript.render() if core.session else "")
                used = core.meter.totals()["total"]
                tokens, cost = tokens + used["input_tokens"] + used["output_tokens"], cost + used["cost"]
                if reason == ENDED or person.over:
                    break
                stops.append(reason)  # the console gave up by itself: a return of control all the same
                sentence = person.react()
                if not sentence:
                    break
                person.pending = f"{variant.instruction}. {sentence}"
        finally:
            core.shutdown()
        if self.plans is not None and person.success:  # Ours-R keeps the plan that did it
            self.plans.save(variant.instruction, plan_that_worked(Transcript.parse("\n".join(transcripts))))
        applied = [{"function": f, "object": o, "values": v} for f, o, v in (knowledge.applied if knowledge else [])]
        return {"variant": variant.name, "role": variant.role, "object": variant.object, "level": task.level, "type": task.type,
                "world": task.world, "corrections": len(person.said), "success": person.success, "said": list(person.said),
                "params": recorder.params() or {}, "applied": applied, "shown": person.shown, "stops": stops,
                "handler": handler.answers if handler is not None else [], "extractor": list(self.extracted),
                "extractor_unread": list(extractor.unread) if extractor is not None else [],
                "selection": list(self.selected) if self.method.knowledge in ("retrieval", "no-visual") else [],
                "history_selection": self.method.history_selection if self.method.handler else None,
                "knowledge_entries": len(self.store.list()) if self.store is not None else
                len(self.plans.plans()) if self.plans is not None else 0, "tokens": tokens,
                "cost_usd": round(cost, 6), "wall_s": round(time.monotonic() - started, 3), "transcript": "\n".join(transcripts),
                "log": logs}

    def _image_with_name(self, name: str) -> tuple[Any, str] | None:
        vector = self.images.get(name)
        return (vector, self.descriptor.name) if vector is not None else None


def object_images(worlds: DrocWorlds, task: DrocTask, variant: Variant, descriptor: Any) -> dict[str, Any]:
    """The crop descriptor of every scene object and every thing the plans act on, as the robot's camera sees
    them in the variant's scene (``DrocWorlds.crop``; a thing out of view or hidden has none: it is then
    matched by name only)."""
    world = worlds.load(task, variant)
    names = [o.name for o in world.objects()]
    for plan in (variant.plan, variant.wrong_plan() if variant.distractor else ()):
        names += [str(v) for c in plan for v in c.fields.values() if isinstance(v, str)]
    out = {}
    for name in dict.fromkeys(names):
        try:
            crop = worlds.crop(task, dataclasses.replace(variant, object=name), load=False)
        except Exception:  # noqa: BLE001 - not a thing the camera can cut out (not in the scene, hidden, out of view)
            continue
        out[name] = descriptor.embed(crop.rgb, crop.depth, crop.mask)
    return out


def robot_functions(task: DrocTask, world: Any, recorder: Recorder, person: DrocPerson) -> dict[str, Callable[..., Any]]:
    if task.world == "household":

        def where() -> dict[str, str]:  # list_objects(location): what stands at a place (or on a thing there)
            return {o.name: o.supported_by or o.place for o in world.objects() if not o.held}

        return HouseholdRobot(recorder, world.object_names, world.thing_states, person, world.layout, where=where).functions()

    return TabletopRobot(recorder, lambda: {o.name: o.position for o in world.objects()}, person).functions()


def _size(worlds: DrocWorlds, task: DrocTask, name: str) -> Any:
    thing = worlds.truth(task.world).objects.get(name)
    return thing.size if thing is not None else None


# ---------------------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class DrocConfig:
    methods: tuple[str, ...] = tuple(METHODS)
    tasks: tuple[str, ...] = ()  # empty: all, in the config's order
    iterations: int = 3
    max_corrections: int = 4
    models: str = "doubles"
    shared_store: bool = True  # one store across the tasks (False: emptied when each task's sequence starts)
    trials: int = 1  # runs of the whole protocol, trial k with seed k
    looks: bool = False  # also the upright/flipped retrieval with mesh cups, once per trial (evaluation.droc_looks)
    retrieval: str = "paper"  # the retrieval's order: DROC's (paper) or by similarity (knowledge.retriever)
    inject: bool = False  # the labelled option: the console applies learned parameters silently (off: the model writes them)
    noise: float = 0.0  # the doubles' imperfect understanding (droc_doubles.Understanding), the same for every method

    def __post_init__(self) -> None:  # a renamed method's old name is read as the new one (once, with a warning)
        object.__setattr__(self, "methods", tuple(dict.fromkeys(method_name(m) for m in self.methods)))

    def validate(self, known_tasks: Sequence[str]) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ConfigError(f"unknown method {unknown[0] if unknown else '(none)'!r}; methods: {', '.join(METHODS)}")
        missing = [t for t in self.tasks if t not in known_tasks]
        if missing:
            raise ConfigError(f"unknown task {missing[0]!r}; tasks: {', '.join(known_tasks)}")
        if not 1 <= self.iterations <= 3:
            raise ConfigError(f"--iterations must be 1, 2 or 3, got {self.iterations}")
        if self.max_corrections < 1:
            raise ConfigError(f"--max-corrections must be at least 1, got {self.max_corrections}")
        if self.retrieval not in ("paper", "similarity"):
            raise ConfigError(f"--retrieval must be paper or similarity, got {self.retrieval!r}")
        if self.trials < 1:
            raise ConfigError(f"--trials must be at least 1, got {self.trials}")
        if not 0.0 <= self.noise <= 1.0:
            raise ConfigError(f"--noise must be in [0, 1], got {self.noise}")


def open_output(out: Path, config: DrocConfig) -> set[tuple[int, str, str, int, str]]:
    """Create or resume ``out``: the same models, correction limit and noise, or a ConfigError; the lines already
    there as (trial, method, task, iteration, variant)."""
    out.mkdir(parents=True, exist_ok=True)
    wanted = {"models": config.models, "max_corrections": config.max_corrections, "shared_store": config.shared_store,
              "noise": config.noise, "retrieval": config.retrieval, "inject": config.inject}
    marker = out / SETTINGS
    if marker.is_file():
        held = {"noise": 0.0, "retrieval": "similarity", "inject": True, **json.loads(marker.read_text())}  # a run from before: as it ran
        if held != wanted:
            raise ConfigError(f"{out} holds a DROC run with {held}; this one is {wanted}: choose another --out")
    elif any(out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no DROC run ({SETTINGS}); choose an empty or new --out")
    else:
        marker.write_text(json.dumps(wanted, indent=2) + "\n")
    return {(int(r.get("trial", 0)), r["method"], r["task"], int(r["iteration"]), r["variant"]) for r in read_results(out)}


def run_droc(config: DrocConfig, out: Path, models: DrocModels, *, tasks: Sequence[DrocTask] | None = None,
             text_embedder: Any = None, progress: Callable[[dict[str, Any]], None] | None = None,
             show_progress: bool = False) -> Path:
    """Run (or resume) the evaluation into ``out``; returns results.jsonl. ``tasks``: instead of config/benchmarks/droc."""

    tasks = list(tasks) if tasks is not None else load_tasks()
    config.validate([t.id for t in tasks])
    if config.noise and models.fresh is None:
        raise ConfigError("--noise sets the offline doubles' understanding; configured models read as they do")
    chosen = [t for t in tasks if not config.tasks or t.id in config.tasks]
    done = open_output(out, config)
    plan = [(k, m, t, i, v) for k in range(config.trials) for m in config.methods for t in chosen
            for i in range(1, config.iterations + 1) for v in t.iteration(i) if (k, m, t.id, i, v.name) not in done]
    if text_embedder is None:

        text_embedder = SentenceTransformerEmbedder()
    descriptor = ColourDepthDescriptor(KnowledgeConfig.load().descriptor)
    from tqdm import tqdm  # deferred: tqdm

    bar = tqdm(total=len(plan), unit="episode", disable=not show_progress, dynamic_ncols=True)
    agents: dict[tuple[int, str], MethodAgent] = {}
    try:
        with DrocWorlds() as worlds:
            for trial, method, task, iteration, variant in plan:
                agent = agents.get((trial, method)) or agents.setdefault((trial, method), MethodAgent(
                    METHODS[method], models.for_trial(config.noise, trial), store_dir(out, trial, method), text_embedder, descriptor,
                    config.retrieval, config.inject))
                if not config.shared_store and iteration == 1 and variant == task.iteration(1)[0]:
                    agent.forget_all()  # a task's sequence starts from an empty store
                with evaluation_run("droc", method=method, task=task.id, trial=iteration, variant=variant.name) as trace_id:
                    row = {"trial": trial, "seed": trial, "noise": config.noise, "method": method, "task": task.id,
                           "iteration": iteration, **agent.episode(worlds, task, variant, config.max_corrections,
                                                                   f"{task.id}/{iteration}/{variant.name}"), "trace_id": trace_id}
                with open(out / RESULTS, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                bar.set_postfix_str(f"trial {trial} {method} {task.id} {iteration} {variant.name}: {row['corrections']} corrections")
                bar.update(1)
                if progress is not None:
                    progress(row)
        looked = {int(r["trial"]) for r in read_looks(out)}
        for trial in (k for k in range(config.trials) if config.looks and k not in looked):
            found = upright_flipped(trial, text_embedder, descriptor)
            with open(out / LOOKS, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(found) + "\n")
    finally:
        bar.close()
    return out / RESULTS


def store_dir(out: Path, trial: int, method: str) -> Path:
    """A method's knowledge store in one trial: ``OUT/knowledge/<method>`` for trial 0 (as before trials),
    ``OUT/knowledge/trial-<k>/<method>`` for trial k."""
    return out / "knowledge" / method if trial == 0 else out / "knowledge" / f"trial-{trial}" / method
