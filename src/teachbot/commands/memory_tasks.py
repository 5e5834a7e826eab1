"""``teachbot memory tasks``: what the task memory holds (teachbot.taskmemory).

    teachbot memory tasks list                # every task with a log: status, progress, what the person asked
    teachbot memory tasks show TASK [--actions N]   # its working memory and its newest actions

Reads the per-task logs in ``memory.store.tasks_dir`` of config/memory.yaml directly (appends are atomic
lines under a lock), so it is safe while a memory node runs. On the postgres backend (or with ``--dsn``) the
logs are first brought in step with the fleet's database (teachbot.taskmemory.pg_log); ``--robot ID`` shows another
robot's logs from the database (restored into a temporary directory). The working memory shown is the
deterministic extractor's (no model is called); where things are comes from the newest logged world.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import sys
import tempfile
from pathlib import Path

from teachbot.commands._args import aligned
from teachbot.errors import ConfigError
from teachbot.memory import MemoryConfig


def register(actions: argparse._SubParsersAction) -> None:
    """Add ``memory tasks`` and its subcommands."""
    tasks = actions.add_parser("tasks", help="list the task memory's tasks, show one's working memory and actions",
                               description="The task memory: per-task logs of what the robot did and where things are.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default="", metavar="FILE", help="memory config (default config/memory.yaml)")
    common.add_argument("--tasks", default="", metavar="DIR", help="directory of the task logs (default: store.tasks_dir)")
    common.add_argument("--profile", default="household", help="robot API profile whose task specifications apply")
    common.add_argument("--dsn", default="", help="the fleet's PostgreSQL database (default: store.dsn of the config "
                        "when its backend is postgres)")
    common.add_argument("--robot", default="", help="another robot's logs, from the database (default: this robot's)")
    tactions = tasks.add_subparsers(dest="tasks_action", required=True, metavar="{list,show}")
    tactions.add_parser("list", parents=[common], help="a table of the tasks with a log").set_defaults(func=run_list)
    show = tactions.add_parser("show", parents=[common], help="one task: its working memory and newest actions")
    show.add_argument("task")
    show.add_argument("--actions", type=int, default=20, help="newest actions to show (default 20)")
    show.set_defaults(func=run_show)


def open_memory(args: argparse.Namespace):  # noqa: ANN201 - a TaskMemory, imported lazily
    from teachbot.stores.backend import open_task_logs  # deferred: loaded when the command runs
    from teachbot.taskmemory import TaskMemory, TaskMemoryConfig  # deferred: loaded when the command runs
    from teachbot.taskmemory.log import TaskLogStore  # deferred: loaded when the command runs

    config = MemoryConfig.load(args.config or None)
    on_database = not args.tasks and (config.backend == "postgres" or bool(args.dsn))
    if args.robot and not on_database:
        raise ConfigError("--robot reads another robot's task logs from the fleet's database: give --dsn or use the "
                          "postgres backend (and no --tasks)")
    if not on_database:
        store = TaskLogStore(Path(args.tasks).expanduser().resolve() if args.tasks else config.tasks_path)
    elif args.robot and args.robot != config.robot_name:  # a copy of another robot's logs, for this command only
        scratch = tempfile.mkdtemp(prefix="teachbot-tasks-")
        atexit.register(shutil.rmtree, scratch, True)
        store = open_task_logs(config, Path(scratch), args.dsn, args.robot)
    else:
        store = open_task_logs(config, None, args.dsn)
    if on_database and not store.link.online:
        from teachbot.memory import MemoryStoreError  # deferred: loaded when the command runs

        store.close()
        raise MemoryStoreError(f"the task memory's database at {store.where} is unreachable; nothing was read")
    if on_database and args.robot and store.robot_id != args.robot:  # the server let the login read only its own
        store.close()
        raise ConfigError(f"the database login at {store.where} is the robot {store.robot_id!r}'s, which reads only its "
                          f"own task logs; to read {args.robot!r}'s give the operator's login with --dsn")
    newest = {}
    for task in store.tasks():  # "not started" tasks need a world: the newest one logged
        records = store.records(task)
        if records and records[-1].environment:
            newest = dict(records[-1].environment)
    return TaskMemory(store, TaskMemoryConfig.load(), args.profile, lambda: newest)


def run_list(args: argparse.Namespace) -> int:
    """Print a table: task, status, progress, what the person asked."""

    memory = open_memory(args)
    rows = [(t["task"], t["status"], t["progress"], t["instruction"]) for t in memory.tasks()]
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(aligned(("task", "status", "progress", "asked"), rows, width, f"no task has a log in {memory.store.directory}"))
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print a task's working memory and its newest actions; an unknown task is an error listing the known ones."""
    memory = open_memory(args)
    try:
        working = memory.working(args.task)
        actions = memory.declarative(args.task, limit=max(args.actions, 1))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    wm = working.to_console()
    print(f"task: {wm['task']} ({wm['status']})\nasked: {wm['instruction']}\nstate: {wm['task_state']}")
    for key in ("task_reminders", "done", "remaining"):
        print(f"{key.replace('_', ' ')}:" + "".join(f"\n  - {v}" for v in wm[key]) if wm[key] else f"{key.replace('_', ' ')}: -")
    print("objects:" + "".join(f"\n  {n}: {at}" for n, at in wm["task_relevant_objects"].items()))
    print(f"newest actions ({len(actions)}):")
    for a in actions:
        print(f"  {a['step']:>4}  {a['action']} -> {a['result']}")
    return 0
