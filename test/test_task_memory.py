"""Task memory core (teachbot.taskmemory): specs and goals, the durable per-task logs, the working memory
(deterministic extractor and worker LLM), and the console's functions, with a toy environment."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from timing import pytest_timeout, timeout

from teachbot.errors import ConfigError
from teachbot.llm.base import LLMError
from teachbot.llm.scripted import ScriptedModel
from teachbot.taskmemory import (
    ConsoleTaskMemory,
    LogExtractor,
    ObjectInfo,
    TaskLogStore,
    TaskMemory,
    TaskMemoryConfig,
    WorkerLLM,
    prompt_block,
    steps,
)
from teachbot.taskmemory.log import ACTION, SUFFIX

CONFIG = TaskMemoryConfig.load()


class Table:
    """A toy world: objects with a type, a colour and where they are; the robot functions move them."""

    def __init__(self) -> None:
        self.things = {
            "apple": ObjectInfo("apple", "red", "table"), "banana": ObjectInfo("banana", "yellow", "table"),
            "red cup": ObjectInfo("cup", "red", "table"), "knife": ObjectInfo("knife", "gray", "table"),
            "box 1": ObjectInfo("bin", "brown", "table"), "box 2": ObjectInfo("bin", "brown", "table"),
            "yellow cube": ObjectInfo("cube", "yellow", "shelf"), "red cube": ObjectInfo("cube", "red", "shelf"),
            "blue cube": ObjectInfo("cube", "blue", "shelf"), "ball": ObjectInfo("ball", "blue", "shelf"),
            "black cube": ObjectInfo("cube", "black", "shelf"),
        }
        self.held = ""

    def environment(self) -> dict[str, ObjectInfo]:
        return dict(self.things)

    def move(self, name: str, at: str) -> None:
        info = self.things[name]
        self.things[name] = ObjectInfo(info.type, info.color, at)

    def functions(self) -> dict:
        def grasp(object_name: str) -> str:
            if object_name not in self.things:
                raise ValueError(f"unknown object {object_name!r}")
            self.held = object_name
            self.move(object_name, "robot")
            return "success"

        def place_object(location: str) -> str:
            if not self.held:
                raise RuntimeError("the right hand holds nothing")
            self.move(self.held, location)
            self.held = ""
            return "success"

        def list_objects() -> list:
            return list(self.things)

        return {"grasp": grasp, "place_object": place_object, "list_objects": list_objects}


def memory(tmp_path: Path, table: Table, worker=None) -> TaskMemory:
    return TaskMemory(tmp_path / "tasks", CONFIG, "household", table.environment, worker)


# ---------------------------------------------------------------------------------------- specs
def test_config_has_the_five_tasks_and_their_goals() -> None:
    tasks = CONFIG.tasks("household")
    assert set(tasks) == {"sort", "fruit_bowl", "point_colors", "jello", "tower"}
    assert [g.target for g in tasks["sort"].goals] == ["box 1", "box 2"]
    assert tasks["point_colors"].ordered
    block = prompt_block(tasks)
    assert "- sort: Sort the fruits" in block and "Only coloured cubes go into the tower" in block


def test_bad_goal_config_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "tm.yaml"
    bad.write_text("task_memory:\n  categories: {fruit: [apple]}\n  profiles:\n    household:\n      t:\n"
                   "        description: x\n        goals: [{select: {category: veg}, into: box}]\n")
    with pytest.raises(ConfigError, match="unknown categories"):
        TaskMemoryConfig.load(bad)
    bad.write_text("task_memory:\n  working_memory: guess\n")
    with pytest.raises(ConfigError, match="working_memory must be one of"):
        TaskMemoryConfig.load(bad)
    bad.write_text("task_memory:\n  worker_temperature: 3\n")
    with pytest.raises(ConfigError, match="worker_temperature must be between 0 and 2"):
        TaskMemoryConfig.load(bad)
    assert CONFIG.worker_temperature == 0.2  # the paper's

    class Recorded(ScriptedModel):
        temperatures: list = []

        def generate(self, prompt: str, stop=None, **kwargs):  # type: ignore[override]
            self.temperatures.append(kwargs.get("temperature"))
            return super().generate(prompt, stop, **kwargs)

    model = Recorded(respond=lambda _p: "apple", name="worker")
    tm = memory(tmp_path, Table(), WorkerLLM(model, "{log}", CONFIG))
    tm.begin("sort", "sort")
    assert model.temperatures and set(model.temperatures) == {0.2}


def test_steps_follow_the_world_and_the_pointing_order() -> None:
    table = Table()
    sort = CONFIG.tasks("household")["sort"]
    env = table.environment()
    relevant = sort.relevant(env, CONFIG.category_of)
    assert relevant == ["apple", "banana", "red cup", "knife"]  # the bins and the shelf's cubes are not its objects
    table.move("apple", "box 1")
    table.move("red cup", "box 1")  # kitchenware in the fruit box: not done
    done = {s.object: s.done for s in steps(sort, relevant, table.environment(), (), CONFIG.category_of)}
    assert done == {"apple": True, "banana": False, "red cup": False, "knife": False}

    point = CONFIG.tasks("household")["point_colors"]
    env = {"banana": ObjectInfo("banana", "yellow", "workbench"), "yellow cube": ObjectInfo("cube", "yellow", "workbench"),
           "apple": ObjectInfo("apple", "red", "workbench")}
    rel = point.relevant(env, CONFIG.category_of)
    early = steps(point, rel, env, ["apple", "banana", "yellow cube"], CONFIG.category_of)
    assert [s.done for s in early] == [True, True, False]  # the red one pointed at before the yellow ones were done
    right = steps(point, rel, env, ["banana", "yellow cube", "apple"], CONFIG.category_of)
    assert all(s.done for s in right)


def test_tower_counts_cubes_standing_on_cubes() -> None:
    table = Table()
    tower = CONFIG.tasks("household")["tower"]
    rel = tower.relevant(table.environment(), CONFIG.category_of)
    assert rel == ["yellow cube", "red cube", "blue cube"]  # not the ball, not the black cube (coloured cubes only)
    table.move("red cube", "yellow cube")
    state = {s.object: s.done for s in steps(tower, rel, table.environment(), (), CONFIG.category_of)}
    assert state == {"yellow cube": True, "red cube": True, "blue cube": False}
    table.move("blue cube", "red cube")
    assert all(s.done for s in steps(tower, rel, table.environment(), (), CONFIG.category_of))


# ---------------------------------------------------------------------------------------- the log
def test_log_survives_a_torn_tail_and_a_restart(tmp_path: Path) -> None:
    store = TaskLogStore(tmp_path)
    env = {"apple": ObjectInfo("apple", "red", "table")}
    store.begin("sort", "sort the fruits", ["apple"], env)
    store.action("sort", "grasp", ("apple",), {}, "'success'", True, env)
    with open(store.path("sort"), "ab") as handle:  # a writer killed mid-line
        handle.write(b'{"kind":"action","task":"sort","ti')
    again = TaskLogStore(tmp_path)  # a restart reads whole lines only
    assert [r.kind for r in again.records("sort")] == ["begin", ACTION]
    again.action("sort", "place_object", ("box 1",), {}, "'success'", True, env)  # the torn tail is cut first
    lines = store.path("sort").read_bytes().splitlines()
    assert len(lines) == 3 and all(json.loads(line) for line in lines)
    assert [r.function for r in TaskLogStore(tmp_path).records("sort")][1:] == ["grasp", "place_object"]
    assert store.records("sort")[-1].seq == 2  # the first store reads what the second appended


def _writer(directory: str, task: str, n: int) -> None:
    store = TaskLogStore(directory)
    for i in range(n):
        store.action(task, "grasp", (f"thing {i}",), {}, "'success'", True, {})


def test_concurrent_writers_in_processes_lose_nothing(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), "sort", 60)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout(60))
        assert p.exitcode == 0
    records = TaskLogStore(tmp_path).records("sort")
    assert len(records) == 180
    assert sorted(r.args[0] for r in records) == sorted(f"thing {i}" for i in range(60) for _ in range(3))


def test_unreadable_middle_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    store = TaskLogStore(tmp_path)
    store.action("sort", "grasp", ("apple",), {}, "'success'", True, {})
    with open(store.path("sort"), "ab") as handle:
        handle.write(b"not json\n")
    store.action("sort", "grasp", ("banana",), {}, "'success'", True, {})
    assert [r.args[0] for r in TaskLogStore(tmp_path).records("sort")] == ["apple", "banana"]


def test_log_refuses_an_unwritable_directory(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    with pytest.raises(ConfigError, match="cannot create the task log directory"):
        TaskLogStore(locked / "tasks")


# ---------------------------------------------------------------------------------------- working memory
def test_interrupted_task_resumes_where_it_stopped_after_a_restart(tmp_path: Path) -> None:
    table = Table()
    console = ConsoleTaskMemory(memory(tmp_path, table))
    f = console.wrap(table.functions())
    first = f["begin_task"]("sorting")  # forgiving name
    assert first["task"] == "sort" and first["status"] == "active" and len(first["remaining"]) == 4
    f["grasp"]("apple")
    f["place_object"]("box 1")
    f["grasp"]("red cup")
    f["place_object"]("box 2")
    tower = f["begin_task"]("tower")  # switched: sort is paused
    assert tower["remaining"][0] == "stack the yellow cube on the tower"
    f["grasp"]("red cube")
    f["place_object"]("yellow cube")
    f["grasp"]("blue cube")
    f["place_object"]("red cube")

    restarted = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())  # every process new
    tasks = {t["task"]: t for t in restarted["current_tasks"]()}
    assert tasks["sort"]["status"] == "paused" and tasks["tower"]["status"] == "done"
    wm = restarted["retrieve_working_memory"]("sort")
    assert wm["done"] == ["put the apple into box 1", "put the red cup into box 2"]
    assert wm["remaining"] == ["put the banana into box 1", "put the knife into box 2"]
    assert wm["task_relevant_objects"] == {"apple": "box 1", "banana": "table", "red cup": "box 2", "knife": "table"}
    resumed = restarted["begin_task"]("sort")
    assert resumed["status"] == "active" and resumed["remaining"] == wm["remaining"]
    recalled = restarted["retrieve_declarative_memory"]("sort")
    assert [h["action"] for h in recalled["recent_actions"]] == ["grasp('apple')", "place_object('box 1')", "grasp('red cup')",
                                                                 "place_object('box 2')"]
    assert recalled["environment_state"] == ["banana", "knife"]  # the extracted state, not the raw rows
    assert recalled["task_state"] == {"box 1": ["apple"], "box 2": ["red cup"]} and recalled["source"] == "extractor"
    assert "after" not in recalled["recent_actions"][0]


def test_failed_actions_are_logged_with_the_error(tmp_path: Path) -> None:
    table = Table()
    f = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())
    f["begin_task"]("sort")
    with pytest.raises(RuntimeError):
        f["place_object"]("box 1")
    history = f["retrieve_declarative_memory"]("sort")["recent_actions"]
    assert history[-1]["result"].startswith("failed: RuntimeError: the right hand holds nothing")


def test_nothing_is_logged_before_a_task_begins_and_unknown_tasks_are_errors(tmp_path: Path) -> None:
    table = Table()
    tm = memory(tmp_path, table)
    f = ConsoleTaskMemory(tm).wrap(table.functions())
    f["grasp"]("apple")
    assert tm.store.tasks() == []
    with pytest.raises(ValueError, match="current_tasks"):
        f["retrieve_working_memory"]("juggle")
    assert f["retrieve_working_memory"]("jello")["status"] == "not started"


def test_a_finished_task_begins_afresh(tmp_path: Path) -> None:
    table = Table()
    f = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())
    f["begin_task"]("tower")
    for cube, on in (("red cube", "yellow cube"), ("blue cube", "red cube")):
        f["grasp"](cube)
        f["place_object"](on)
    assert f["retrieve_working_memory"]("tower")["status"] == "done"
    again = f["begin_task"]("tower")
    assert again["done"] == list(again["done"]) and f["retrieve_declarative_memory"]("tower")["recent_actions"] == []


WORKER_ANSWER = """<think>The apple went into box 1; the rest is open.</think>
Here is the working memory:
```json
{"task_reminders": ["fruits into box 1"], "task_state": "one of four done", "done": ["put the apple into box 1"],
 "remaining": ["put the banana into box 1", "put the red cup into box 2", "put the knife into box 2"],
 "task_relevant_objects": {"apple": "box 1", "banana": "table"}}
```"""


def paper_worker(selection: str = "apple, banana, red cup, knife", state: str = WORKER_ANSWER,
                 declarative: str = "") -> ScriptedModel:
    """A scripted worker: Prompt 4 (selection) answered with ``selection``, the declarative prompt (Prompt 5:
    it asks for "environment_state") with ``declarative``, the working memory's state prompt with ``state``."""
    def respond(prompt: str) -> str:
        if "Name the objects that are relevant" in prompt:
            return selection
        return declarative if '"environment_state"' in prompt else state

    return ScriptedModel(respond=respond, name="worker")


def test_worker_llm_selects_from_the_full_object_list_and_extracts_the_state_from_the_log(tmp_path: Path) -> None:
    table = Table()
    model = paper_worker("1. Apple, the banana, red cup, knife.")
    worker = WorkerLLM(model, (Path(__file__).parents[1] / "prompts" / "task_memory_worker.txt").read_text(), CONFIG)
    tm = memory(tmp_path, table, worker)
    f = ConsoleTaskMemory(tm).wrap(table.functions())
    assert f["retrieve_working_memory"]("sort")["status"] == "not started"
    f["begin_task"]("sort")
    select = next(p for p in model.prompts if "Name the objects that are relevant" in p)
    assert "apple, banana, red cup, knife, box 1, box 2" in select  # every object at the table, the boxes too
    assert "yellow cube" not in select  # not at the task's place
    assert "Fruits go into box 1." in select  # the procedural memory's reminders are the task's description
    assert tm.run("sort").relevant == ("apple", "banana", "red cup", "knife")  # the worker's selection, logged
    f["grasp"]("apple")
    f["place_object"]("box 1")
    wm = f["retrieve_working_memory"]("sort")
    assert wm["task_state"] == "one of four done" and wm["remaining"][0] == "put the banana into box 1"
    prompt = model.prompts[-1]
    assert "Action: place_object('box 1') -> 'success'" in prompt and "box 1: apple" in prompt
    assert "table: banana, red cup, knife" in prompt and "yellow cube" not in prompt  # only the task's objects
    assert worker.stats.to_json() == {"calls": 5, "failures": 0, "fallbacks": 0, "problems": []}


def test_worker_llm_judges_whether_a_task_is_done(tmp_path: Path) -> None:
    table = Table()
    done = '{"task_state": "all sorted", "done": ["put the apple into box 1"], "remaining": []}'
    worker = WorkerLLM(paper_worker(state=done), "{log}", CONFIG)
    tm = memory(tmp_path, table, worker)
    tm.begin("sort", "sort")
    assert tm.working("sort").status == "done"  # the worker says so; the world (nothing sorted) does not
    tm.begin("sort", "sort again")  # a finished task begins afresh: a second fresh begin record
    assert [r.instruction for r in tm.store.records("sort")] == ["sort", "sort again"]


@pytest.mark.parametrize("answer", ["I think the robot should go on sorting.",
                                    '{"task_state": "x", "task_relevant_objects": {"unicorn": "table"}}'])
def test_worker_llm_failures_are_counted_and_the_fallback_is_named(tmp_path: Path, answer: str) -> None:
    table = Table()
    lines: list[str] = []
    worker = WorkerLLM(paper_worker(state=answer), "{task} {log}", CONFIG, lines.append)
    tm = memory(tmp_path, table, worker)
    tm.begin("sort", "sort")
    wm = tm.working("sort")
    assert wm.source == "extractor" and len(wm.remaining) == 4
    assert worker.stats.failures == worker.stats.fallbacks == 2  # begin's extraction and this one
    assert lines and "the extractor answers instead" in lines[-1]
    strict = WorkerLLM(paper_worker(state=answer), "{task} {log}", CONFIG, fallback=False)
    tm = memory(tmp_path / "strict", table, strict)
    tm.begin("sort", "sort")
    wm = tm.working("sort")
    assert wm.source == "worker-failed" and wm.remaining == () and wm.task_state.startswith("unknown:")
    assert strict.stats.fallbacks == 0 and strict.stats.failures == 2 and strict.stats.problems


def test_worker_llm_selection_naming_other_objects_is_a_counted_failure(tmp_path: Path) -> None:
    table = Table()
    strict = WorkerLLM(paper_worker(selection="apple, unicorn"), "{log}", CONFIG, fallback=False)
    tm = memory(tmp_path, table, strict)
    tm.begin("sort", "sort")
    assert tm.run("sort").relevant == ("apple",)  # the made-up object dropped, the rest as the worker said
    blank = WorkerLLM(paper_worker(selection="Sure! Here they are:"), "{log}", CONFIG, fallback=False)
    tm = memory(tmp_path / "blank", table, blank)
    tm.begin("sort", "sort")
    assert tm.run("sort").relevant == ("apple", "banana", "red cup", "knife", "box 1", "box 2")  # no selection at all
    assert strict.stats.problems[0].startswith("the selection named objects that are not at the task's place")
    fallback = WorkerLLM(paper_worker(selection="apple, unicorn"), "{log}", CONFIG)
    tm = memory(tmp_path / "fb", table, fallback)
    tm.begin("sort", "sort")
    assert tm.run("sort").relevant == ("apple", "banana", "red cup", "knife") and fallback.stats.fallbacks >= 1


def test_worker_llm_outage_is_counted(tmp_path: Path) -> None:
    class Down(ScriptedModel):
        def generate(self, prompt: str, stop=None, **kwargs):  # type: ignore[override]
            raise LLMError("connection refused")

    table = Table()
    worker = WorkerLLM(Down([]), "{task}", CONFIG)
    tm = memory(tmp_path, table, worker)
    tm.begin("sort", "sort")
    assert tm.working("sort").source == "extractor"
    assert worker.stats.failures == worker.stats.fallbacks == 3 and "connection refused" in worker.stats.problems[0]


def test_a_task_not_started_lists_only_what_is_still_to_do(tmp_path: Path) -> None:
    table = Table()
    table.move("apple", "box 1")  # already where the sorting puts it
    wm = memory(tmp_path, table).working("sort")
    assert wm.status == "not started"
    assert wm.done == ("put the apple into box 1",)
    assert wm.remaining == ("put the banana into box 1", "put the red cup into box 2", "put the knife into box 2")


def test_extractor_for_a_task_without_specification(tmp_path: Path) -> None:
    table = Table()
    f = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())
    f["begin_task"]("tidy the shelf")
    f["grasp"]("ball")
    wm = f["retrieve_working_memory"]("tidy the shelf")
    assert wm["done"] == ["grasp('ball') -> 'success'"] and wm["task_relevant_objects"] == {"ball": "robot"}
    assert LogExtractor(CONFIG)  # the oracle is constructible on its own
    assert list((tmp_path / "tasks").glob(f"*{SUFFIX}"))


def test_switching_with_a_full_hand_reminds_to_put_it_back(tmp_path: Path) -> None:
    table = Table()
    f = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())
    f["begin_task"]("tower")
    f["grasp"]("red cube")
    sort = f["begin_task"]("sort")
    assert sort["task_reminders"][0] == "The robot holds the red cube, which this task is not about: put it back first."
    assert f["retrieve_working_memory"]("tower")["task_relevant_objects"]["red cube"] == "robot"


def test_cli_lists_and_shows_tasks(tmp_path: Path) -> None:
    import subprocess
    import sys

    table = Table()
    f = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())
    f["begin_task"]("sort")
    f["grasp"]("apple")
    f["place_object"]("box 1")
    base = [sys.executable, "-m", "teachbot.cli", "memory", "tasks"]
    limit = pytest_timeout(60)
    listed = subprocess.run([*base, "list", "--tasks", str(tmp_path / "tasks")], capture_output=True, text=True, timeout=limit)
    assert listed.returncode == 0, listed.stderr
    assert "sort" in listed.stdout and "1 of 4 steps done" in listed.stdout
    shown = subprocess.run([*base, "show", "Sorting", "--tasks", str(tmp_path / "tasks")], capture_output=True, text=True, timeout=limit)
    assert shown.returncode == 0 and "put the banana into box 1" in shown.stdout and "place_object('box 1')" in shown.stdout
    missing = subprocess.run([*base, "show", "juggle", "--tasks", str(tmp_path / "tasks")], capture_output=True, text=True, timeout=limit)
    assert missing.returncode == 1 and "no task is called 'juggle'" in missing.stderr


def test_acting_is_logged_only_under_a_task_begun_in_this_conversation(tmp_path: Path) -> None:
    from teachbot.language.dialog import SessionEnded

    table = Table()
    console = ConsoleTaskMemory(memory(tmp_path, table))
    said = iter([{"type": "dialog", "text": "sort the fruits"}])

    def wait_for_trigger() -> dict:
        try:
            return next(said)
        except StopIteration:
            raise SessionEnded("the person left") from None

    f = console.wrap({**table.functions(), "wait_for_trigger": wait_for_trigger})
    f["wait_for_trigger"]()
    assert f["begin_task"]("sort")["instruction"] == "sort the fruits"  # the person's words are the task's request
    f["grasp"]("apple")
    with pytest.raises(SessionEnded):
        f["wait_for_trigger"]()  # the conversation ends
    f["place_object"]("box 1")  # a later request that is no task: not the sorting's
    assert [h["action"] for h in f["retrieve_declarative_memory"]("sort")["recent_actions"]] == ["grasp('apple')"]
    fresh = ConsoleTaskMemory(memory(tmp_path, table)).wrap(table.functions())  # after a restart, likewise
    fresh["grasp"]("banana")
    assert len(fresh["retrieve_declarative_memory"]("sort")["recent_actions"]) == 1


def test_the_worker_reads_the_newest_log_entries_only_and_a_failed_action_as_failed(tmp_path: Path) -> None:
    import dataclasses

    table = Table()
    model = paper_worker()
    config = dataclasses.replace(CONFIG, worker_log_lines=2)
    f = ConsoleTaskMemory(TaskMemory(tmp_path / "tasks", config, "household", table.environment,
                                     WorkerLLM(model, "{log}", config))).wrap(table.functions())
    f["begin_task"]("sort")
    f["grasp"]("apple")
    f["place_object"]("box 1")
    with pytest.raises(RuntimeError):
        f["place_object"]("box 2")
    f["retrieve_working_memory"]("sort")
    log = model.prompts[-1]
    assert log.startswith("Task begun: ") and "Log entry 1:" not in log and "grasp('apple')" not in log
    assert "Log entry 2:\nAction: place_object('box 1') -> 'success'\nbox 1: apple\ntable: banana, red cup, knife" in log
    assert "Log entry 3:\nAction: place_object('box 2') -> failed: RuntimeError: the right hand holds nothing" in log


# ---------------------------------------------------------------------------------------- declarative memory
def sorted_two(f: dict) -> None:
    f["begin_task"]("sort")
    f["grasp"]("apple")
    f["place_object"]("box 1")
    f["grasp"]("red cup")
    f["place_object"]("box 2")


def test_declarative_memory_is_the_workers_extraction_from_the_filled_prompt(tmp_path: Path) -> None:
    table = Table()
    # the worker's reading, on purpose not the world's (the knife is on the table): the answer must be the
    # worker's extraction, not rows of the log nor the simulator's truth
    answer = ('<think>box 1 holds the apple</think> {"environment_state": ["banana"], '
              '"task_state": {"box 1": ["apple"], "box 2": ["red cup", "knife"]}, "pointed_at": []}')
    model = paper_worker(declarative=answer)
    worker = WorkerLLM(model, "{log}", CONFIG, fallback=False)
    f = ConsoleTaskMemory(memory(tmp_path, table, worker)).wrap(table.functions())
    sorted_two(f)
    recalled = f["retrieve_declarative_memory"]("sort")
    prompt = model.prompts[-1]
    assert prompt.startswith("You keep the declarative memory of a robot")  # prompts/task_memory_declarative.txt
    assert "sort task: Sort the fruits on the table" in prompt and "The task's place: table" in prompt
    assert "The task's objects: apple, banana, red cup, knife" in prompt
    assert "Action: place_object('box 2') -> 'success'\nbox 1: apple\ntable: banana, knife\nbox 2: red cup" in prompt
    assert "{log}" not in prompt and "{place}" not in prompt
    assert recalled["source"] == "worker" and recalled["environment_state"] == ["banana"]
    assert recalled["task_state"] == {"box 1": ["apple"], "box 2": ["red cup", "knife"]} and recalled["pointed_at"] == []
    assert [a["step"] for a in recalled["recent_actions"]] == [1, 2, 3, 4] and "problem" not in recalled
    assert worker.stats.failures == 0


@pytest.mark.parametrize("answer, why", [
    ("The apple is in box 1.", "no JSON object"),
    ('{"environment_state": ["banana"], "task_state": {"box 1": ["unicorn"]}}', "not in the world: ['unicorn']"),
    ('{"environment_state": "banana", "task_state": ["apple"]}', "task_state must map"),
])
def test_a_failed_declarative_extraction_is_counted_and_said_not_replaced_by_the_truth(tmp_path: Path, answer: str,
                                                                                         why: str) -> None:
    table = Table()
    strict = WorkerLLM(paper_worker(declarative=answer), "{log}", CONFIG, fallback=False)
    f = ConsoleTaskMemory(memory(tmp_path, table, strict)).wrap(table.functions())
    sorted_two(f)
    before = strict.stats.failures
    recalled = f["retrieve_declarative_memory"]("sort")
    assert strict.stats.failures == before + 1 and strict.stats.fallbacks == 0 and why in strict.stats.problems[-1]
    assert recalled["source"] == "worker-failed" and why in recalled["problem"]
    assert "task_state" not in recalled and "environment_state" not in recalled  # no state, least of all the truth
    assert len(recalled["recent_actions"]) == 4  # what the log says is still there to read
    lenient = WorkerLLM(paper_worker(declarative=answer), "{log}", CONFIG)
    f = ConsoleTaskMemory(memory(tmp_path / "fallback", table, lenient)).wrap(table.functions())
    recalled = f["retrieve_declarative_memory"]("sort")
    assert lenient.stats.fallbacks >= 1 and lenient.stats.failures >= 1
    assert recalled["source"] == "extractor" and "the deterministic extractor answered instead" in recalled["problem"]


def test_declarative_memory_of_the_extractor_follows_the_log_not_the_world(tmp_path: Path) -> None:
    table = Table()
    tm = memory(tmp_path, table)
    f = ConsoleTaskMemory(tm).wrap(table.functions())
    assert f["retrieve_declarative_memory"]("tower")["environment_state"] == ["yellow cube", "red cube", "blue cube"]
    f["begin_task"]("tower")
    for cube, on in (("red cube", "yellow cube"), ("blue cube", "red cube")):
        f["grasp"](cube)
        f["place_object"](on)
    table.move("apple", "box 2")  # after the last log entry, by someone else: the tower's log does not know
    recalled = f["retrieve_declarative_memory"]("tower")
    assert recalled["environment_state"] == ["yellow cube"]  # the base stays on the shelf
    assert recalled["task_state"] == {"yellow cube": ["red cube"], "red cube": ["blue cube"]}  # in the order stacked
    assert "black cube" not in str(recalled)  # not the tower's object
    assert tm.recall("tower", limit=1)["recent_actions"] == [{"step": 4, "action": "place_object('red cube')",
                                                               "result": "'success'"}]
