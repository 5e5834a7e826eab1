"""The multi-task benchmark's paper protocol and strict judge (Issue 30 items 2 and 3): the tolerant name
matcher, the robot's skills that refuse an interrupted task's actions, a non-goal action failing its task,
the tasks of the paper's Table I, and the five tasks interrupted and resumed in one chat with the stand-ins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.evaluation.multitask import MultitaskConfig, MultitaskModels, run_case
from teachbot.evaluation.multitask_doubles import CoordinatorDouble
from teachbot.evaluation.multitask_judge import Judge, NameMatcher
from teachbot.evaluation.multitask_protocol import INTERRUPT, Line, SkillRecorder, paper_chats
from teachbot.evaluation.multitask_reading import Reader, WorkerDouble
from teachbot.evaluation.multitask_report import format_table, summarise
from teachbot.llm.scripted import ScriptedModel
from teachbot.taskmemory import ObjectInfo, TaskMemoryConfig
from teachbot.world.household_layout import HouseholdLayout

CONFIG = MultitaskConfig.load()
MEMORY = TaskMemoryConfig.load()
SPECS = MEMORY.tasks("household")
ROOT = Path(__file__).resolve().parents[1]
ORDER = ("sort", "fruit_bowl", "point_colors", "jello", "tower")


# ---------------------------------------------------------------------------------------- names
def test_names_are_matched_by_a_normalised_name_or_a_short_name_that_fits_one_object() -> None:
    objects = {"fresh apple": ObjectInfo("apple", "red", "table"), "white cup": ObjectInfo("cup", "white", "table"),
               "small bowl": ObjectInfo("small_bowl", "white", "table"), "blue cube": ObjectInfo("cube", "blue", "w"),
               "green cube": ObjectInfo("cube", "green", "w")}
    matcher = NameMatcher(objects)
    assert matcher.named("The apple and the cup.") == {"fresh apple", "white cup"}  # the type, one of each
    assert matcher.named("FRESH_APPLE, the Small Bowls") == {"fresh apple", "small bowl"}  # case, underscores, plural
    assert matcher.named("a red apple") == {"fresh apple"}  # its colour and its type
    assert matcher.named("the bowl") == {"small bowl"}  # the last word of its name
    assert matcher.named("the cube") == set()  # two cubes: ambiguous, names neither
    assert matcher.named("the blue cubes and the green cube") == {"blue cube", "green cube"}
    assert matcher.named("a pineapple") == set()  # whole words only
    assert matcher.score(["Box 1 holds the apple."], {"fresh apple"}) == 1.0
    assert matcher.score(["the apple and the cup"], {"fresh apple"}) == 0.0  # one too many
    assert matcher.score(["Nothing."], set()) == 1.0 and matcher.score(["I do not remember."], set()) == 0.0


# ---------------------------------------------------------------------------------------- the tasks of Table I
def test_the_tasks_are_the_papers_with_their_distractors() -> None:
    from teachbot.evaluation.multitask_world import MultitaskWorld

    with MultitaskWorld() as world:
        world.load(*ORDER)
        judge = Judge(world, MEMORY)
        judge.start(SPECS[t] for t in ORDER)
        relevant = {t: set(judge.relevant[t]) for t in ORDER}
        scene = {t: set(judge.objects[t].answerable) for t in ORDER}
    assert relevant["sort"] == {"fresh apple", "ripe banana", "pear", "white cup", "small bowl"}
    assert scene["sort"] - relevant["sort"] == {"baseball"}  # stays on the table
    assert relevant["fruit_bowl"] == {"green apple", "small banana", "lemon", "orange", "green pear"}
    assert scene["fruit_bowl"] - relevant["fruit_bowl"] == {"tin can"}
    assert relevant["point_colors"] == {"yellow lemon", "long banana", "red apple"}  # yellow, then red
    assert scene["point_colors"] - relevant["point_colors"] == {"soup can", "navel orange", "bosc pear"}
    assert relevant["jello"] == {"dessert bowl", "jello", "banana"}
    assert scene["jello"] - relevant["jello"] == {"apple", "food can", "soft pear"}
    assert relevant["tower"] == {"red cube", "green cube", "blue cube"}  # on the shelf, apart from the pointing task
    assert scene["tower"] - relevant["tower"] == {"black cube", "white cube"}  # the colour filter


# ---------------------------------------------------------------------------------------- enforcing and judging actions
@pytest.fixture(scope="module")
def world():
    from teachbot.evaluation.multitask_world import MultitaskWorld

    with MultitaskWorld() as w:
        yield w


def recorder_for(world, tasks: tuple[str, ...], interrupt_at: dict[str, int]) -> SkillRecorder:
    world.load(*tasks)
    judge = Judge(world, MEMORY)
    judge.start(SPECS[t] for t in tasks)
    return SkillRecorder(world, judge.objects, interrupt_at)


def test_after_the_interruption_no_action_of_the_task_runs_until_it_is_resumed(world) -> None:
    rec = recorder_for(world, ("sort", "fruit_bowl"), {"sort": 3})
    rec.hear(Line("start", "sort", "sort"))
    for name, target in (("grasp", "fresh apple"), ("place_object", "box 1"), ("grasp", "ripe banana")):
        field = "object_name" if name == "grasp" else "location"
        assert rec.call(name, **{field: target}).success
    with pytest.raises(RuntimeError, match="the person is talking to you"):
        rec.call("place_object", location="box 1")  # half the sorting's actions: the person interrupts
    assert rec.interrupted["sort"] and INTERRUPT
    rec.hear(Line("switch", "fruit_bowl", "first the fruit bowl"))
    with pytest.raises(RuntimeError, match="the person stopped the sort task"):
        rec.call("place_object", location="box 1")  # the banana into box 1: the sorting goes on -- refused
    assert world.truth()["ripe banana"] == "robot" and rec.violations["sort"]  # it did not run; counted
    assert rec.call("place_object", location="table").success  # putting it back where it was: allowed
    with pytest.raises(RuntimeError, match="the person stopped the sort task"):
        rec.call("grasp", object_name="pear")
    assert world.truth()["pear"] == "table" and len(rec.violations["sort"]) == 2
    assert rec.call("grasp", object_name="green apple").success and not rec.violations["fruit_bowl"]
    assert rec.call("place_object", location="bowl").success
    rec.hear(Line("resume", "sort", "now finish sorting"))  # the person asks to go on: it runs again
    assert rec.call("grasp", object_name="pear").success and "sort" not in rec.paused
    assert "fruit_bowl" in rec.paused  # the fruit bowl is now the stopped one


def test_an_action_on_a_non_goal_object_is_a_violation_of_the_task_asked_for(world) -> None:
    rec = recorder_for(world, ("fruit_bowl",), {})
    rec.hear(Line("start", "fruit_bowl", "fruits into the bowl"))
    assert rec.call("grasp", object_name="tin can").success
    assert rec.call("place_object", location="bowl").success  # the can in the fruit bowl
    assert [v for v in rec.violations["fruit_bowl"] if "'tin can'" in v] and len(rec.violations["fruit_bowl"]) == 2


class Meddler(ScriptedModel):
    """The coordinator double, but the first time it would grasp ``instead_of`` it points at ``wrong`` (a
    misbehaving model for the test; the double itself is never made to fail)."""

    def __init__(self, inner: CoordinatorDouble, instead_of: str, wrong: str) -> None:
        super().__init__(respond=self.answer, name="meddler")
        self.inner, self.instead_of, self.wrong, self.done = inner, instead_of, wrong, False

    def answer(self, prompt: str) -> str:
        said = self.inner.answer(prompt)
        if not self.done and said == f"grasp({self.instead_of!r})":
            self.done = True
            return f"point_at({self.wrong!r})"
        return said


def doubles(slip: float = 0.0, seed: int = 0) -> MultitaskModels:
    from teachbot.evaluation.multitask_world import multitask_catalog

    catalog, places = multitask_catalog(), HouseholdLayout.load().names()
    worker = WorkerDouble(Reader.of(catalog, MEMORY.categories, places), slip, seed)
    return MultitaskModels(CoordinatorDouble(catalog, MEMORY, places, slip, seed), worker)


def test_the_strict_judge_fails_a_task_whose_goals_are_met_after_a_non_goal_action(world, tmp_path: Path) -> None:
    base = doubles()
    meddling = MultitaskModels(Meddler(base.interaction, "green apple", "tin can"), base.worker)
    row = run_case(world, "memory", "standalone", ("fruit_bowl",), CONFIG, meddling, tmp_path / "store")
    assert row["goals_done"]["fruit_bowl"], row["transcript"][-2000:]  # every fruit ended in the bowl
    assert row["violations"]["fruit_bowl"] == ["point_at touched 'tin can', not an object of the fruit_bowl task"]
    assert row["done"]["fruit_bowl"] is False and not row["success"]
    assert summarise([row])["paper"]["memory"]["standalone"]["by_task"]["fruit_bowl"]["success"]["mean"] == 0.0


# ---------------------------------------------------------------------------------------- the paper's protocol
def test_the_papers_intervened_protocol_is_one_chat_of_two_rounds() -> None:
    scripts = [CONFIG.tasks[t] for t in CONFIG.order]
    assert CONFIG.order == ORDER and CONFIG.cases(["intervened"]) == [("intervened", ORDER)]
    [chat] = paper_chats("intervened", scripts)
    assert [(x.kind, x.task) for x in chat[:5]] == [("start", "sort")] + [("switch", t) for t in ORDER[1:]]
    assert [(x.kind, x.task) for x in chat[5:]] == [(k, t) for t in ORDER for k in ("resume", "environment", "task")]
    assert len(paper_chats("consecutive", scripts)) == 1 and len(paper_chats("standalone", scripts)) == 5


@pytest.fixture(scope="module")
def five(world, tmp_path_factory) -> dict:
    store = tmp_path_factory.mktemp("five")
    return {m: run_case(world, m, "intervened", ORDER, CONFIG, doubles(), store / m) for m in ("memory", "no-memory")}


def test_five_tasks_interrupted_and_resumed_in_one_chat_with_the_worker(five) -> None:
    row = five["memory"]
    assert row["interruptions"] == {t: True for t in ORDER}, row["task_actions"]
    assert row["done"] == {t: True for t in ORDER}, (row["violations"], row["transcript"][-3000:])
    assert row["worker"]["calls"] > 0 and row["worker"]["failures"] == 0
    assert set(row["probes"]) == set(ORDER) and all(set(p) == {"environment", "task"} for p in row["probes"].values())
    by_task = summarise([row])["paper"]["memory"]["intervened"]["by_task"]
    assert set(by_task) == set(ORDER)
    for task in ORDER:
        assert by_task[task]["task_retention"]["mean"] == 1.0 and by_task[task]["environment_retention"]["mean"] == 1.0, row["probes"][task]
    assert row["transcript"].count(">>> wait_for_trigger()") >= 15  # one chat: every line heard by one console
    assert len([s for s in row["stops"] if s]) == 0


def test_without_memory_the_chat_keeps_its_history(five) -> None:
    row = five["no-memory"]
    assert row["interruptions"] == {t: True for t in ORDER} and row["worker"] is None
    assert "begin_task" not in row["transcript"] and "retrieve_working_memory" not in row["transcript"]
    assert row["transcript"].count("Please sort the fruits") == 1  # one chat from the first line to the last
    assert set(row["probes"]) == set(ORDER)
    table = format_table(summarise([row]), by_task=True)
    assert all(f"| paper | no-memory | intervened | {t} | 1 |" in table for t in ORDER)


def test_cli_runs_the_papers_protocol_by_default_and_names_it(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "teachbot.cli", "eval", "multitask", "--methods", "memory-extractor",
           "--tasks", "jello,point_colors", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(400), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    [row] = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["protocol"] == "paper" and row["mode"] == "intervened" and row["tasks"] == ["point_colors", "jello"]
    assert row["interruptions"] == {"point_colors": True, "jello": True} and all(row["done"].values())
    assert "| paper | memory-extractor | intervened | 2 |" in done.stdout
    report = (tmp_path / "report.md").read_text()
    assert "Protocol: **paper**, the paper's protocol" in report
    assert "| paper | memory-extractor | intervened | jello | 1 |" in report
