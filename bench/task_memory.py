#!/usr/bin/env python3
"""The task memory: log append and working-memory retrieval latency with 10 000 logged actions.

* append (headline 1): ``TaskMemory.log_action`` of one robot call with the world after it (12 objects)
  to a task whose log already holds --size actions (default 10 000): the record is written under the
  directory's lock and fsync'ed before it returns, as the memory node does for every acting call.
  Goal: median at most 20 ms.
* working memory (headline 2): ``TaskMemory.working(task)`` right after an append (the console's pattern:
  act, then ask what is left), with the deterministic extractor (no model): the new record read
  incrementally, the run since the task began, the goals checked against the newest world. Goal: median
  at most 20 ms.
* for information: the declarative view (the newest 20 actions), ``tasks()`` over five task logs, and the
  first query after a restart (a new TaskMemory reading every record of the log).

The log is written once per size into out/bench-task-memory/n<size> (bulk-written, then copied per run);
nothing is written into the user's store.

Usage: python bench/task_memory.py [--runs 200] [--size 10000] [--smoke]
"""

from __future__ import annotations

import _common as C

C.setup()

import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

GOAL_MS = 20.0
ROOT = C.REPO / "out" / "bench-task-memory"
FORMAT = 1  # bump when the synthetic log changes: logs of another format are rebuilt
TASKS = ("sort", "fruit_bowl", "point_colors", "jello", "tower")
OBJECTS = {  # the sort scene and a few others: what the world holds after each action
    "fresh apple": ("apple", "red"), "orange": ("orange", "orange"), "ripe banana": ("banana", "yellow"),
    "red cup": ("cup", "red"), "knife": ("knife", "gray"), "spoon": ("spoon", "gray"),
    "box 1": ("bin", "gray"), "box 2": ("bin", "gray"), "red cube": ("cube", "red"), "green cube": ("cube", "green"),
    "blue cube": ("cube", "blue"), "ball": ("ball", "blue"),
}
PLACES = {"fresh apple": "table", "orange": "table", "ripe banana": "table", "red cup": "table", "knife": "table",
          "spoon": "table", "box 1": "table", "box 2": "table", "red cube": "shelf", "green cube": "shelf",
          "blue cube": "shelf", "ball": "shelf"}


def timed_ms(fn):  # noqa: ANN001, ANN201
    seconds, value = C.timed(fn)
    return seconds * 1000.0, value


def world(step: int) -> dict[str, dict[str, str]]:
    """The world after action ``step``: objects move between the table, the robot and the boxes."""
    names = list(OBJECTS)
    moving = names[step % 6]
    out = {n: {"type": t, "color": c, "at": PLACES[n]} for n, (t, c) in OBJECTS.items()}
    out[moving]["at"] = "robot" if step % 2 == 0 else ("box 1" if step % 12 < 6 else "box 2")
    return out


def build(size: int) -> Path:
    """A store whose 'sort' log holds one begin and ``size`` actions, and four short other task logs."""
    path = ROOT / f"n{size}"
    stamp = path / "format.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == {"format": FORMAT, "size": size}:
        return path
    shutil.rmtree(path, ignore_errors=True)
    (path / "tasks").mkdir(parents=True)
    start = time.time() - size
    for task in TASKS:
        n = size if task == "sort" else 20
        lines = [json.dumps({"kind": "begin", "task": task, "time": start, "instruction": f"please do the {task} task",
                             "relevant": list(OBJECTS)[:6], "environment": world(0)}, separators=(",", ":"))]
        for i in range(n):
            call = ("grasp", [list(OBJECTS)[i % 6]]) if i % 2 == 0 else ("place_object", ["box 1" if i % 12 < 6 else "box 2"])
            lines.append(json.dumps({"kind": "action", "task": task, "time": start + i, "function": call[0], "args": call[1],
                                     "kwargs": {}, "result": "'success'", "ok": True, "environment": world(i)},
                                    separators=(",", ":")))
        (path / "tasks" / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
    stamp.write_text(json.dumps({"format": FORMAT, "size": size}))
    return path


def main() -> None:
    p = C.parser(__doc__.splitlines()[0], runs=200, smoke={"runs": 5, "size": 100})
    p.add_argument("--size", type=int, default=10_000, help="logged actions of the measured task (default 10 000)")
    args = p.parse_args()
    from teachbot.taskmemory import ObjectInfo, TaskMemory, TaskMemoryConfig

    config = TaskMemoryConfig.load()
    source = build(args.size)
    with tempfile.TemporaryDirectory(prefix="run-", dir=ROOT) as tmp:  # on the disk the store lives on, not a tmpfs
        store = Path(tmp) / "tasks"
        shutil.copytree(source / "tasks", store)
        current = {"world": world(1)}
        env = lambda: {n: ObjectInfo(**i) for n, i in current["world"].items()}  # noqa: E731
        restart_ms, _ = timed_ms(lambda: TaskMemory(store, config, "household", env).working("sort"))
        memory = TaskMemory(store, config, "household", env)
        memory.begin("sort", "please sort", env())  # resumes: the run goes on with --size actions in it
        appends, working, declarative, tasks = [], [], [], []
        for i in range(args.runs):
            current["world"] = world(i)
            name = list(OBJECTS)[i % 6]
            ms, _ = timed_ms(lambda name=name: memory.log_action("grasp", (name,), {}, "'success'", True))
            appends.append(ms)
            ms, wm = timed_ms(lambda: memory.working("sort"))
            working.append(ms)
            if i % 10 == 0:
                declarative.append(timed_ms(lambda: memory.declarative("sort"))[0])
                tasks.append(timed_ms(memory.tasks)[0])
        logged = len(memory.store.records("sort")) - 2  # minus the two begin records
    append, work = C.summary(appends, 3), C.summary(working, 3)
    for name, s in (("append", append), ("working memory", work)):
        C.say(f"{name} with {args.size} logged actions: median {s['median']:.2f} ms, p90 {s.get('p90', 0):.2f} ms vs "
              f"{GOAL_MS} ms -> {'met' if s['median'] <= GOAL_MS else 'MISSED'}")
    C.say(f"first working-memory query after a restart (the whole log read): {restart_ms:.1f} ms; working memory had "
          f"{len(wm.remaining)} steps left; the log ended with {logged} actions")
    worst = max(append["median"], work["median"])
    C.emit({
        "benchmark": "task_memory", "unit": "ms", "runs": args.runs, "size": args.size,
        "median": worst, "goal": GOAL_MS, "meets_goal": bool(worst <= GOAL_MS), "ratio": round(worst / GOAL_MS, 4),
        "append_ms": append, "working_memory_ms": work, "declarative_ms": C.summary(declarative, 3),
        "tasks_ms": C.summary(tasks, 3), "first_query_after_restart_ms": round(restart_ms, 3),
        "working_memory": "deterministic extractor (no model)", "fsync_per_append": True,
        "loadavg_during": os.getloadavg(), "machine": C.machine(),
    })


if __name__ == "__main__":
    main()
