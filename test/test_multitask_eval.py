"""The multi-task benchmark (teachbot.evaluation.multitask): its config, the person's script, the judging,
the coordinator double's reading of its prompt, and whole cases in the simulated household with and
without task memory (an interrupted task resumed by a new console after every node restarted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.console.prompt import PromptBuilder
from teachbot.errors import ConfigError
from teachbot.evaluation.multitask import (
    SWITCH,
    MultitaskConfig,
    MultitaskModels,
    conversations,
    named_objects,
    run_case,
    score_answer,
    summarise,
)
from teachbot.evaluation.multitask_doubles import CoordinatorDouble, task_block, which_task
from teachbot.language.registry import RobotApi

CONFIG = MultitaskConfig.load()
ROOT = Path(__file__).resolve().parents[1]


def test_config_pairs_tasks_of_different_places_and_every_task_has_a_script() -> None:
    assert set(CONFIG.tasks) == {"sort", "fruit_bowl", "point_colors", "jello", "tower"}
    assert len(CONFIG.pairs) == 5 and {a for a, _ in CONFIG.pairs} == set(CONFIG.tasks) == {b for _, b in CONFIG.pairs}
    assert len(CONFIG.cases(["standalone", "consecutive", "intervened"])) == 15
    assert CONFIG.cases(["intervened"], ["sort"]) == [("intervened", "sort", "tower")]


def test_config_errors_name_the_fix(tmp_path: Path) -> None:
    text = (ROOT / "config/benchmarks/multitask/benchmark.yaml").read_text()
    bad = tmp_path / "b.yaml"
    bad.write_text(text.replace("[[sort, tower]", "[[sort, sort]"))
    with pytest.raises(ConfigError, match="both tasks work at the table"):
        MultitaskConfig.load(bad)
    bad.write_text(text.replace("interrupt_at: 0.5", "interrupt_at: 1.5"))
    with pytest.raises(ConfigError, match="between 0 and 1"):
        MultitaskConfig.load(bad)


def test_conversations_of_each_mode() -> None:
    a, b = CONFIG.tasks["sort"], CONFIG.tasks["tower"]
    assert conversations("standalone", a, None, False) == [[("", a.start), ("environment", a.environment_probe.ask),
                                                              ("task", a.task_probe.ask)]]
    two = conversations("consecutive", a, b, False)
    assert [len(c) for c in two] == [1, 3] and two[1][0] == ("", b.start)
    inter = conversations("intervened", a, b, False)
    assert inter[0] == [("", a.start), (SWITCH, b.switch)] and inter[1][-1] == ("", a.resume)
    assert len(conversations("intervened", a, b, True)) == 1


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


@pytest.fixture(scope="module")
def models():
    from teachbot.evaluation.multitask_world import multitask_catalog

    return MultitaskModels(CoordinatorDouble(multitask_catalog()))


def test_intervened_task_resumes_where_it_stopped_with_memory(world, models, tmp_path: Path) -> None:
    row = run_case(world, "memory", "intervened", "sort", "tower", CONFIG, models, tmp_path / "store")
    assert row["interrupted"] and row["success"], row["transcript"][-3000:]
    assert row["done"] == {"sort": True, "tower": True}
    assert row["task_retention"] == 1.0 and row["environment_retention"] == 1.0, row["probes"]
    assert row["probes"]["environment"]["truth"]  # box 1 held something when asked
    assert row["actions"] == row["required_actions"]  # nothing done twice after the restart
    resumed = row["transcript"].split("Now finish sorting")[1]
    assert "begin_task('sort')" in resumed and "grasp('fresh apple')" not in resumed
    log = (tmp_path / "store" / "tasks" / "sort.jsonl").read_text().splitlines()
    assert sum(json.loads(line)["kind"] == "begin" for line in log) == 2  # begun, then resumed


def test_without_memory_the_robot_forgets_and_redoes(world, models, tmp_path: Path) -> None:
    row = run_case(world, "no-memory", "intervened", "sort", "tower", CONFIG, models, tmp_path / "store")
    assert row["interrupted"]
    assert row["task_retention"] == 0.0 and row["environment_retention"] == 0.0
    assert row["actions"] > row["required_actions"]  # after the break it starts the sorting over
    assert "begin_task" not in row["transcript"] and not (tmp_path / "store" / "tasks").exists()


def test_pointing_in_order_is_judged_from_where_the_arm_pointed(world, models, tmp_path: Path) -> None:
    row = run_case(world, "memory", "standalone", "point_colors", "", CONFIG, models, tmp_path / "store")
    assert row["success"], row["transcript"][-2000:]
    assert row["pointed"][:2] and set(row["pointed"][:2]) == {"yellow block", "yellow banana"}
    assert set(row["pointed"][2:]) == {"red apple", "red mug"}
    summary = summarise([row])
    assert summary["memory"]["standalone"]["success"] == 1.0


def test_cli_runs_writes_and_resumes(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "teachbot.cli", "eval", "multitask", "--methods", "memory", "--modes", "standalone",
           "--tasks", "jello", "--out", str(tmp_path)]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(300), cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "| memory | standalone | 1 | 1.00 |" in first.stdout
    rows = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["done"] == {"jello": True}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=pytest_timeout(300), cwd=ROOT)
    assert again.returncode == 0 and len((tmp_path / "results.jsonl").read_text().splitlines()) == 1
    assert (tmp_path / "report.md").read_text().startswith("# Multi-task benchmark")
    assert (tmp_path / "multitask.png").stat().st_size > 1000  # the bars of success and retention
    bad = subprocess.run(cmd[:-2] + ["--tasks", "juggling", "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=pytest_timeout(120), cwd=ROOT)
    assert bad.returncode != 0 and "unknown tasks ['juggling']" in bad.stderr
