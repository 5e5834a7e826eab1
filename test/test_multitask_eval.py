"""The multi-task benchmark (teachbot.evaluation.multitask): its config, the person's script, the judging,
the stand-ins' reading of their prompts (never the task specifications), and whole cases in the simulated
household with the paper's worker, the extractor ablation and without task memory (an interrupted task
resumed by a new console after every node restarted), the logs deleted or corrupted in between, trials."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.console.prompt import PromptBuilder
from teachbot.errors import ConfigError
from teachbot.evaluation.multitask import MultitaskConfig, MultitaskModels, named_objects, run_case, score_answer
from teachbot.evaluation.multitask_doubles import CoordinatorDouble, task_block, task_lines, which_task
from teachbot.evaluation.multitask_protocol import Line, pair_chats
from teachbot.evaluation.multitask_reading import Reader, WorkerDouble
from teachbot.evaluation.multitask_report import format_table, rate, summarise
from teachbot.language.registry import RobotApi
from teachbot.taskmemory import TaskMemoryConfig
from teachbot.world.household_layout import HouseholdLayout

CONFIG = MultitaskConfig.load()
ROOT = Path(__file__).resolve().parents[1]


def test_config_pairs_tasks_of_different_places_and_every_task_has_a_script() -> None:
    assert set(CONFIG.tasks) == {"sort", "fruit_bowl", "point_colors", "jello", "tower"}
    assert len(CONFIG.pairs) == 5 and {a for a, _ in CONFIG.pairs} == set(CONFIG.tasks) == {b for _, b in CONFIG.pairs}
    assert len(CONFIG.cases(["standalone", "consecutive", "intervened"], protocol="pairs")) == 15
    assert CONFIG.cases(["intervened"], ["sort"], "pairs") == [("intervened", ("sort", "tower"))]


def test_config_errors_name_the_fix(tmp_path: Path) -> None:
    text = (ROOT / "config/benchmarks/multitask/benchmark.yaml").read_text()
    bad = tmp_path / "b.yaml"
    bad.write_text(text.replace("[[sort, tower]", "[[sort, sort]"))
    with pytest.raises(ConfigError, match="both tasks work at the table"):
        MultitaskConfig.load(bad)
    bad.write_text(text.replace("interrupt_at: 0.5", "interrupt_at: 1.5"))
    with pytest.raises(ConfigError, match="between 0 and 1"):
        MultitaskConfig.load(bad)


def test_conversations_of_each_mode_of_the_pairs_deviation() -> None:
    a, b = CONFIG.tasks["sort"], CONFIG.tasks["tower"]
    assert pair_chats("standalone", a, None, False) == [[Line("start", "sort", a.start),
                                                         Line("environment", "sort", a.environment_probe.ask),
                                                         Line("task", "sort", a.task_probe.ask)]]
    two = pair_chats("consecutive", a, b, False)
    assert [len(c) for c in two] == [1, 3] and two[1][0] == Line("start", "tower", b.start)
    inter = pair_chats("intervened", a, b, False)
    assert inter[0] == [Line("start", "sort", a.start), Line("switch", "tower", b.switch)]
    assert inter[1][-1] == Line("resume", "sort", a.resume)
    assert len(pair_chats("intervened", a, b, True)) == 1


def test_answers_are_scored_by_the_objects_they_name() -> None:
    names = ["apple", "red apple", "red cup", "cup", "box 1"]
    assert named_objects("The red apple and the cup.", names) == {"red apple", "cup"}
    assert score_answer(["red apple, cup."], {"red apple", "cup"}, names) == 1.0
    assert score_answer(["red apple."], {"red apple", "cup"}, names) == 0.0
    assert score_answer(["Nothing."], set(), names) == 1.0
    assert score_answer(["I do not remember that."], set(), names) == 0.0  # not knowing is not "nothing"


def test_the_double_reads_the_task_list_of_the_real_prompt_and_maps_every_line_to_its_task() -> None:
    base = PromptBuilder.for_profile(RobotApi.load("household")).base()
    tasks = task_block(base)
    assert set(tasks) == set(CONFIG.tasks)
    for name, script in CONFIG.tasks.items():
        for line in (script.start, script.switch, script.resume, script.environment_probe.ask, script.task_probe.ask):
            assert which_task(line, tasks) == name, line
    no_memory = RobotApi.load("household")
    no_memory = RobotApi(no_memory.profile, tuple(f for f in no_memory.functions if f.name != "begin_task"))
    assert "begin_task(" not in PromptBuilder.for_profile(no_memory).base()  # the list stays, the how-to goes


@pytest.fixture(scope="module")
def world():
    from teachbot.evaluation.multitask_world import MultitaskWorld

    with MultitaskWorld() as w:
        yield w


def doubles(slip: float = 0.0, seed: int = 0, wrong_object: float = 0.0) -> MultitaskModels:
    from teachbot.evaluation.multitask_world import multitask_catalog

    catalog, config, places = multitask_catalog(), TaskMemoryConfig.load(), HouseholdLayout.load().names()
    worker = WorkerDouble(Reader.of(catalog, config.categories, places), slip, seed)
    return MultitaskModels(CoordinatorDouble(catalog, config, places, slip, seed, wrong_object), worker)


@pytest.fixture(scope="module")
def models():
    return doubles()


def test_intervened_task_resumes_where_it_stopped_with_memory(world, models, tmp_path: Path) -> None:
    row = run_case(world, "memory", "intervened", ("sort", "tower"), CONFIG, models, tmp_path / "store", protocol="pairs")
    assert row["interrupted"] and row["success"], row["transcript"][-3000:]
    assert row["worker"]["calls"] > 0 and row["worker"]["failures"] == row["worker"]["fallbacks"] == 0
    assert row["done"] == {"sort": True, "tower": True}
    assert row["task_retention"] == 1.0 and row["environment_retention"] == 1.0, row["probes"]
    assert row["probes"]["sort"]["environment"]["truth"]  # box 1 held something when asked
    # nothing done twice after the restart; what the hand held at the switch was put back and taken again
    assert row["put_back"] == 1 and row["actions"] == row["required_actions"] + 2
    resumed = row["transcript"].split("Now finish sorting")[1]
    assert "begin_task('sort')" in resumed and "grasp('fresh apple')" not in resumed
    log = (tmp_path / "store" / "tasks" / "sort.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["kind"] == "begin" for line in log) == 2  # begun, then resumed


def test_without_memory_the_robot_looks_but_forgets_and_redoes(world, models, tmp_path: Path) -> None:
    row = run_case(world, "no-memory", "intervened", ("sort", "tower"), CONFIG, models, tmp_path / "store", protocol="pairs")
    assert row["interrupted"]
    assert row["task_retention"] == 0.0  # what is left of the sorting: another conversation's, forgotten
    assert row["environment_retention"] == 1.0  # what is in box 1: it looks, as the memory method may
    assert "list_objects('box 1')" in row["transcript"] and "list_objects('table')" in row["transcript"]
    assert row["actions"] > row["required_actions"]  # after the break it starts the sorting over
    assert "begin_task" not in row["transcript"] and not (tmp_path / "store" / "tasks").exists()
    assert row["worker"] is None


def test_pointing_in_order_is_judged_from_where_the_arm_pointed(world, models, tmp_path: Path) -> None:
    row = run_case(world, "memory", "standalone", ("point_colors",), CONFIG, models, tmp_path / "store")
    assert row["success"], row["transcript"][-2000:]
    assert row["pointed"][:2] and set(row["pointed"][:2]) == {"yellow lemon", "long banana"}
    assert row["pointed"][2:] == ["red apple"]  # the can, the orange and the pear are neither
    summary = summarise([row])
    assert summary["paper"]["memory"]["standalone"]["success"]["mean"] == 1.0


def test_cli_runs_writes_and_resumes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "teachbot.cli", "eval", "multitask", "--protocol", "pairs", "--methods", "memory",
           "--modes", "standalone", "--tasks", "jello", "--out", str(tmp_path)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(300), cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "| pairs | memory | standalone | 1 | 1.00 [0.21, 1.00] |" in first.stdout  # Wilson over one case
    rows = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["done"] == {"jello": True}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(300), cwd=ROOT)
    assert again.returncode == 0 and len((tmp_path / "results.jsonl").read_text().splitlines()) == 1
    assert (tmp_path / "report.md").read_text().startswith("# Multi-task benchmark")
    assert (tmp_path / "multitask.png").stat().st_size > 1000  # the bars of success and retention
    bad = subprocess.run(cmd[:-2] + ["--tasks", "juggling", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=pytest_timeout(120), cwd=ROOT)
    assert bad.returncode != 0 and "unknown tasks ['juggling']" in bad.stderr


# ---------------------------------------------------------------------------------------- the stand-ins read only their prompts
def reader() -> Reader:
    from teachbot.evaluation.multitask_world import multitask_catalog

    return Reader.of(multitask_catalog(), TaskMemoryConfig.load().categories, HouseholdLayout.load().names())


def test_the_coordinator_double_plans_from_the_prompt_it_reads_not_from_the_config() -> None:
    double = doubles().interaction
    assert not hasattr(double, "specs") and not hasattr(double, "config")
    base = PromptBuilder.for_profile(RobotApi.load("household")).base()
    assert task_lines(base)["jello"][1] == list(TaskMemoryConfig.load().tasks("household")["jello"].reminders)
    changed = base.replace("Sort the fruits on the table into box 1 and the kitchenware into box 2.",
                           "Sort the fruits on the counter into box 2 and the kitchenware into box 1.")
    spec = double.reader.read("sort", *task_lines(changed)["sort"])
    assert spec.place == "counter" and [(g.kind, g.target, g.categories) for g in spec.goals] == [
        ("into", "box 2", ("fruit",)), ("into", "box 1", ("kitchenware",))]
    plan = double.plan_from_spec(spec, ["fresh apple", "red mug", "baseball", "box 1"], set())
    assert plan == ["grasp('fresh apple')", "place_object('box 2')", "grasp('red mug')", "place_object('box 1')"]


def test_the_worker_double_answers_the_real_prompts_from_their_text_alone(tmp_path: Path) -> None:
    from teachbot.language.prompts import load_prompt
    from teachbot.taskmemory import ObjectInfo, TaskMemory, WorkerLLM

    config = TaskMemoryConfig.load()
    world = {"fresh apple": ObjectInfo("apple", "red", "table"), "red mug": ObjectInfo("cup", "red", "table"),
             "baseball": ObjectInfo("ball", "white", "table"), "box 1": ObjectInfo("bin", "gray", "table"),
             "box 2": ObjectInfo("bin", "gray", "table"), "pear": ObjectInfo("pear", "green", "counter")}
    model = WorkerDouble(reader())
    worker = WorkerLLM(model, load_prompt("task_memory_worker.txt"), config, fallback=False)
    memory = TaskMemory(tmp_path / "tasks", config, "household", lambda: dict(world), worker)
    begun = memory.begin("sort", "please sort")
    assert memory.run("sort").relevant == ("fresh apple", "red mug")  # Prompt 4: the baseball and the boxes left out
    assert begun.remaining == ("put the fresh apple into box 1", "put the red mug into box 2") and begun.source == "worker"
    world["fresh apple"] = ObjectInfo("apple", "red", "robot")
    memory.log_action("grasp", ("fresh apple",), {}, "'success'", True)
    world["fresh apple"] = ObjectInfo("apple", "red", "box 1")
    memory.log_action("place_object", ("box 1",), {}, "'success'", True)
    state = memory.working("sort")  # Prompt 5: the last log entry says where things are
    assert state.done == ("put the fresh apple into box 1",) and state.remaining == ("put the red mug into box 2",)
    world["red mug"] = ObjectInfo("cup", "red", "box 2")  # moved, but never logged: the worker cannot know
    assert memory.working("sort").remaining == ("put the red mug into box 2",)
    assert worker.stats.failures == 0 and worker.stats.calls == 4


def test_imperfection_is_seeded_the_same_for_every_reading_and_varies_across_seeds() -> None:
    spec = reader().read("sort", "Sort the fruits on the table into box 1 and the kitchenware into box 2.")
    names = ["fresh apple", "red cup", "orange", "ripe banana", "knife", "spoon", "box 1", "box 2"]
    exact = reader().relevant(spec, names)
    assert exact == ["fresh apple", "orange", "ripe banana", "red cup", "knife", "spoon"]
    picks = [tuple(reader().relevant(spec, names, seed, 0.3)) for seed in range(12)]
    assert picks[3] == tuple(reader().relevant(spec, names, 3, 0.3))  # the same seed: the same decisions
    assert len(set(picks)) > 3 and any(set(p) != set(exact) for p in picks)


def test_rates_have_wilson_intervals_over_cases_and_t_intervals_over_trials() -> None:
    one = [{"success": s, "trial": 0} for s in (1, 1, 1, 0)]
    assert rate(one, "success") == {"mean": 0.75, "ci95": [0.301, 0.954], "over": "cases"}
    three = [{"success": s, "trial": t} for t, group in enumerate(((1, 1), (1, 0), (0, 0))) for s in group]
    got = rate(three, "success")
    assert got["mean"] == 0.5 and got["over"] == "trials" and got["ci95"][0] == 0.0 and got["ci95"][1] == 1.0
    assert rate([{"success": None}], "success") is None
    row = {"method": "memory", "mode": "standalone", "first": "jello", "second": "", "success": True, "trial": 0,
           "task_retention": 1.0, "environment_retention": 0.0, "actions": 6, "required_actions": 6,
           "worker": {"calls": 4, "failures": 1, "fallbacks": 0, "problems": ["x"]}}
    table = format_table(summarise([row]), by_task=True)
    assert ("| pairs | memory | standalone | jello | 1 | 1.00 [0.21, 1.00] | 1.00 [0.21, 1.00] | 0.00 [0.00, 0.79] | 1.00 | 0 "
            "| 1 / 0 |") in table
    pair = {**row, "mode": "consecutive", "second": "sort", "success": False, "done": {"jello": True, "sort": False}}
    summary = summarise([pair])["pairs"]["memory"]["consecutive"]
    assert summary["success"]["mean"] == 0.0 and summary["by_task"]["jello"]["success"]["mean"] == 1.0  # the task's own


# ---------------------------------------------------------------------------------------- success depends on the logs
def _sort_log(store: Path) -> Path:
    return store / "tasks" / "sort.jsonl"


def delete_logs(store: Path, _k: int) -> None:
    import shutil

    shutil.rmtree(store / "tasks")


def forget_objects(store: Path, _k: int) -> None:
    """Corrupt the sorting's log: its begin records lose the objects the task is about."""
    lines = [json.loads(line) for line in _sort_log(store).read_text().splitlines()]
    for line in lines:
        if line["kind"] == "begin":
            line["relevant"] = []
    _sort_log(store).write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_memory_score_drops_when_the_logs_are_deleted_or_corrupted(world, models, tmp_path: Path) -> None:
    intact = run_case(world, "memory", "intervened", ("sort", "tower"), CONFIG, models, tmp_path / "intact", protocol="pairs")
    assert intact["success"] and intact["task_retention"] == 1.0
    assert intact["actions"] == intact["required_actions"] + 2 * intact["put_back"]  # only the held one taken twice
    deleted = run_case(world, "memory", "intervened", ("sort", "tower"), CONFIG, models, tmp_path / "deleted", protocol="pairs",
                       between=delete_logs)
    assert deleted["task_retention"] == 0.0, deleted["probes"]  # "what is left" now lists what was done too
    assert deleted["actions"] > deleted["required_actions"]  # the fruits already in box 1 are sorted again
    corrupted = run_case(world, "memory", "intervened", ("sort", "tower"), CONFIG, models, tmp_path / "corrupt", protocol="pairs",
                         between=forget_objects)
    assert not corrupted["success"] and corrupted["done"]["sort"] is False  # the kitchenware is never sorted
    assert corrupted["task_retention"] == 0.0


def test_cli_trials_give_intervals_over_the_trials(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "teachbot.cli", "eval", "multitask", "--protocol", "pairs", "--methods", "memory",
           "--modes", "standalone", "--tasks", "jello", "--trials", "2", "--slip", "0.3", "--seed", "4", "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(300), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["trial"] for r in rows] == [0, 1] and rows[0]["seed"] != rows[1]["seed"]
    summary = json.loads((tmp_path / "summary.json").read_text())["pairs"]["memory"]["standalone"]
    assert summary["trials"] == 2 and summary["success"]["over"] == "trials"
    assert "## Per task" in (tmp_path / "report.md").read_text()


def test_what_the_hand_held_at_the_interruption_is_put_back_and_the_robot_looks_again(world, models, tmp_path: Path) -> None:
    row = run_case(world, "no-memory", "intervened", ("fruit_bowl", "point_colors"), CONFIG, models, tmp_path / "store",
                   protocol="pairs")
    resumed = row["transcript"].split("Now finish putting the fruits")[1]
    assert "already holds 'small banana'" in resumed  # interrupted between grasping the banana and putting it down
    held, look = resumed.index("place_object('counter')"), resumed.rindex("list_objects('counter')")
    assert held < look and row["success"], (row["done"], row["violations"], row["goals_done"])  # put back where seen, then a new look
    assert row["task_retention"] == 0.0 and row["actions"] > row["required_actions"]  # it forgot; it redid the apple


def test_a_failing_worker_is_counted_and_nothing_answers_for_it_unless_the_fallback_is_named(world, models, tmp_path: Path) -> None:
    from teachbot.llm.base import LLMError
    from teachbot.llm.scripted import ScriptedModel

    class Down(ScriptedModel):
        def generate(self, prompt: str, stop=None, **kwargs):  # type: ignore[override]
            raise LLMError("connection refused")

    down = MultitaskModels(models.interaction, Down([]))
    row = run_case(world, "memory", "standalone", ("jello",), CONFIG, down, tmp_path / "none", protocol="pairs")
    assert not row["success"] and row["actions"] == 0  # no working memory: nothing to do, and nobody pretends otherwise
    assert row["worker"]["failures"] == row["worker"]["calls"] > 0 and row["worker"]["fallbacks"] == 0
    assert "unknown: the worker model failed" in row["transcript"]
    named = MultitaskModels(models.interaction, Down([]), fallback=True)
    row = run_case(world, "memory", "standalone", ("jello",), CONFIG, named, tmp_path / "fallback", protocol="pairs")
    assert row["success"] and row["worker"]["fallbacks"] == row["worker"]["failures"] > 0  # the oracle answered, counted
    assert f"| {row['worker']['failures']} / {row['worker']['fallbacks']} |" in format_table(summarise([row]))  # the report says so


def test_the_worker_double_answers_the_declarative_prompt_from_its_text_alone(tmp_path: Path) -> None:
    from teachbot.taskmemory import ObjectInfo, TaskMemory, WorkerLLM

    config = TaskMemoryConfig.load()
    world = {"yellow cube": ObjectInfo("cube", "yellow", "shelf"), "red cube": ObjectInfo("cube", "red", "shelf"),
             "blue cube": ObjectInfo("cube", "blue", "shelf"), "black cube": ObjectInfo("cube", "black", "shelf")}
    model = WorkerDouble(reader())
    worker = WorkerLLM(model, "{log}", config, fallback=False)
    memory = TaskMemory(tmp_path / "tasks", config, "household", lambda: dict(world), worker)
    memory.begin("tower", "build it")
    for cube, on in (("red cube", "yellow cube"), ("blue cube", "red cube")):
        world[cube] = ObjectInfo("cube", cube.split()[0], "robot")
        memory.log_action("grasp", (cube,), {}, "'success'", True)
        world[cube] = ObjectInfo("cube", cube.split()[0], on)
        memory.log_action("place_object", (on,), {}, "'success'", True)
    world["black cube"] = ObjectInfo("cube", "black", "robot")  # never logged: the worker cannot know
    recalled = memory.recall("tower")
    assert recalled["source"] == "worker" and worker.stats.failures == 0
    assert recalled["environment_state"] == ["yellow cube"]
    assert recalled["task_state"] == {"yellow cube": ["red cube"], "red cube": ["blue cube"]}
    assert "black cube" not in json.dumps(recalled)  # not the tower's, and not in the log anyway
    assert '"environment_state"' in model.prompts[-1] and "The task's place: shelf" in model.prompts[-1]


class DeclarativeFails(WorkerDouble):
    """The worker double with a broken declarative memory: it names an object no world holds."""

    def answer(self, prompt: str) -> str:
        if '"environment_state"' in prompt:
            return '{"environment_state": [], "task_state": {"shelf": ["unicorn"]}, "pointed_at": ["unicorn"]}'
        return super().answer(prompt)


def test_the_pointing_is_recalled_from_the_declarative_memory_and_a_failed_extraction_costs_retention(
        world, models, tmp_path: Path) -> None:
    row = run_case(world, "memory", "intervened", ("point_colors", "jello"), CONFIG, models, tmp_path / "ok", protocol="pairs")
    assert "retrieve_declarative_memory('point_colors')" in row["transcript"]
    assert row["environment_retention"] == 1.0 and row["worker"]["failures"] == 0, row["probes"]
    broken = MultitaskModels(models.interaction, DeclarativeFails(models.worker.reader))
    row = run_case(world, "memory", "intervened", ("point_colors", "jello"), CONFIG, broken, tmp_path / "broken",
                   protocol="pairs")
    assert row["environment_retention"] == 0.0, row["probes"]  # nothing answered for the worker: the truth is not handed over
    assert row["worker"]["failures"] >= 1 and row["worker"]["fallbacks"] == 0
    assert any("not in the world: ['unicorn']" in p for p in row["worker"]["problems"])
    assert "the state could not be extracted from the log" in row["transcript"]


def test_the_wrong_object_slip_is_seeded_the_same_for_every_method_and_fails_the_task(world, tmp_path: Path) -> None:
    import re

    wrong = {}
    for method in ("memory", "memory-extractor", "no-memory"):
        row = run_case(world, method, "standalone", ("jello",), CONFIG, doubles(seed=3, wrong_object=0.5), tmp_path / method,
                       protocol="pairs")
        grasped = re.findall(r">>> grasp\('([^']+)'\)", row["transcript"])
        wrong[method] = [n for n in grasped if n not in ("jello", "dessert bowl", "banana")]
        assert not row["success"] and all(n in ("food can", "apple", "soft pear") for n in wrong[method]), row["transcript"]
        assert "list_objects('sink')" in row["transcript"]  # the wrong thing is one it saw there
    assert wrong["memory"] == wrong["memory-extractor"] == wrong["no-memory"] and wrong["memory"]  # the same draws
    clean = run_case(world, "memory", "standalone", ("jello",), CONFIG, doubles(seed=3), tmp_path / "clean", protocol="pairs")
    assert clean["success"] and "list_objects('sink')" not in clean["transcript"]  # with memory it never needed to look
