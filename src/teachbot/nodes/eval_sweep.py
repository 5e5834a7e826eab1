"""Running a sweep: a simulated stack per worker, one agent per method, each scheduled run recorded.

``run_sweep`` is what ``teachbot eval cap`` calls. With one worker the stack runs in this process; with
more, each worker is a child process with its own ROS domain and simulator and takes whole methods.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from teachbot.evaluation import TASKS_BY_KEY
from teachbot.evaluation.baselines import make_baseline
from teachbot.evaluation.doubles import begin_run
from teachbot.evaluation.harness import METHODS, AgentModels, ConsoleAgent, Method, PreparedRun
from teachbot.evaluation.metrics import RunRecord, read_results
from teachbot.evaluation.sweep import (
    RunKey,
    SweepConfig,
    append_result,
    open_output,
    prepare_episode,
    progress,
    schedule,
    split_methods,
    store_dir,
    validate,
)
from teachbot.evaluation.world_state import WorldState, describe
from teachbot.memory.config import MemoryConfig
from teachbot.ros_env import configure_loopback
from teachbot.tracing import evaluation_run

ModelFactory = Callable[[Method], AgentModels]


def all_tasks() -> dict[str, type]:
    """Every template's task class by key."""

    return dict(TASKS_BY_KEY)


def run_worker(config: SweepConfig, out: Path, methods: Sequence[str], make_models: ModelFactory,
               done: set[RunKey], on_record: Callable[[RunRecord], None] = lambda _r: None,
               client: Any = None, max_cost: float = 0.0) -> None:
    """This worker's methods, in order, on ``client`` (a started stack's skill client) or a stack of its own; each trial
    of a method with a fresh agent on its own store (learning from scratch).
    ``max_cost``: no run starts once the sweep's recorded cost (every worker's) reached it, USD (0: no cap)."""
    tasks = all_tasks()
    stack = None
    if client is None:
        from teachbot.nodes.stack import InProcessStack  # deferred: pybullet, rclpy

        stack = InProcessStack(real_time_factor=0.0, camera_enabled=False)
        client = stack.start()
    try:
        pending = [r for r in schedule(config, tasks) if r.method in methods and r.key not in done]
        for name in methods:
            for trial in sorted({r.trial for r in pending if r.method == name}):
                models = make_models(METHODS[name])
                agent = make_agent(METHODS[name], store_dir(out, name, trial), models, client, lambda: _objects(client),
                                   person=config.person, seed=config.seed, run_timeout=config.run_timeout,
                                   memory_config=_memory_config(config), deviations=config.deviations)
                try:
                    for run in (r for r in pending if r.method == name and r.trial == trial):
                        if max_cost and spent(out) >= max_cost:
                            return  # stopped cleanly between runs: the same command with a higher --max-cost goes on
                        record = _one_run(agent, models, client, tasks[run.template], run)
                        append_result(out, record)
                        on_record(record)
                finally:
                    agent.close()
    finally:
        if stack is not None:
            stack.stop()


def make_agent(method: Method, store: Path, models: AgentModels, client: Any, objects: Callable[[], dict],
               **options: Any) -> Any:
    """The agent that runs ``method``: the console (ours and its ablations) or a baseline."""
    if method.kind == "console":
        return ConsoleAgent(method, store, models, client, objects, **options)

    return make_baseline(method, store, models, client, objects, **options)


def _memory_config(config: SweepConfig) -> Any:
    """config/memory.yaml, with the sweep's seed examples when it names them."""


    settings = MemoryConfig.load()
    return dataclasses.replace(settings, seeds_dir=Path(config.seeds_dir).resolve()) if config.seeds_dir else settings


def _objects(client: Any) -> dict[str, list[float]]:
    """The object list the console's functions read: the simulator's ground truth (as perception gives it)."""
    return {o.name: [o.pose.position.x, o.pose.position.y, o.pose.position.z] for o in client.world_state().objects}


def _one_run(agent: ConsoleAgent, models: AgentModels, client: Any, task_cls: type, run: Any) -> RunRecord:
    episode = prepare_episode(task_cls, run)
    reply = client.reset(scene_yaml=episode.scene_yaml())
    if not reply.success:
        raise RuntimeError(f"the simulator refused the scene of {run.template} run {run.run}: {reply.message}")
    client.call("go_home")
    initial = WorldState.from_ros(client.world_state())
    task = episode.task

    def check() -> tuple[bool, str]:
        final = WorldState.from_ros(client.world_state())
        return task.success(initial, final), task.diagnose(initial, final)

    def world() -> str:
        state = WorldState.from_ros(client.world_state())
        return "; ".join(describe(o, state) for o in state.objects)

    plan = task.oracle(initial)
    begin_run([models.interaction, models.function_generation, models.improvement], plan, episode.instruction)
    # evaluation.trial is the run's index (as the other evaluations' repetitions are); sweep_trial the sweep's trial
    with evaluation_run("cap", method=run.method, split=run.split, task=run.template, trial=run.run,
                        sweep_trial=run.trial) as trace_id:
        record = agent.run(PreparedRun(run.method, run.split, run.template, run.run, episode.instruction, check, plan,
                                       world, extra={"seed": run.seed, "scene": episode.scene_yaml(), "trace_id": trace_id}))
    return dataclasses.replace(record, trial=run.trial)


def spent(out: Path) -> float:
    """USD the sweep's recorded runs cost (results.jsonl, every worker's)."""
    results = out / "results.jsonl"
    return sum(r.cost_usd for r in read_results(results)) if results.exists() else 0.0


def _child(config: SweepConfig, out: str, methods: list[str], factory: ModelFactory,
           done: set[RunKey], max_cost: float = 0.0) -> None:
    os.environ.pop("ROS_DOMAIN_ID", None)  # the parent's id came along: reserve one of its own
    configure_loopback()
    import rclpy  # deferred: rclpy

    rclpy.init()
    try:
        run_worker(config, Path(out), methods, factory, done, max_cost=max_cost)
    finally:
        rclpy.shutdown()


def run_sweep(config: SweepConfig, out: str | Path, make_models: ModelFactory, *, workers: int = 1,
              show_progress: bool = True, client: Any = None, max_cost: float = 0.0) -> Path:
    """Run (or resume) a sweep into ``out``; returns the results file. ``client``: an already running stack (tests).
    ``max_cost``: USD; no run starts once the recorded runs cost that much (the run in progress finishes)."""
    out = Path(out)
    tasks = all_tasks()
    validate(config, tasks, list(METHODS))
    done = open_output(out, config)
    total = len(schedule(config, tasks))
    with progress(total, len(done), show_progress) as update:
        groups = split_methods(config.methods, workers)
        if len(groups) == 1 or client is not None:
            if client is None:
                import rclpy  # deferred: rclpy

                rclpy.init()
                try:
                    run_worker(config, out, config.methods, make_models, done, update, max_cost=max_cost)
                finally:
                    rclpy.shutdown()
            else:
                run_worker(config, out, config.methods, make_models, done, update, client=client, max_cost=max_cost)
        else:
            _run_children(config, out, groups, make_models, done, update, max_cost)
    return out / "results.jsonl"


def _run_children(config: SweepConfig, out: Path, groups: list[list[str]], make_models: ModelFactory,
                  done: set[RunKey], update: Callable[[RunRecord], None], max_cost: float = 0.0) -> None:
    """One child process per group; the parent follows results.jsonl for the progress bar."""


    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_child, args=(config, str(out), group, make_models, done, max_cost), daemon=True)
                for group in groups]
    for child in children:
        child.start()
    seen = len(done)
    results = out / "results.jsonl"
    while True:
        alive = any(child.is_alive() for child in children)
        try:
            records = read_results(results) if results.exists() else []
        except ValueError:  # a line being written right now: read it on the next round
            records = []
            time.sleep(0.2)
            continue
        for record in records[seen:]:
            update(record)
        seen = len(records)
        if not alive:
            break
        time.sleep(1.0)
    failed = [child.exitcode for child in children if child.exitcode]
    if failed:
        raise RuntimeError(f"{len(failed)} worker(s) failed (exit {failed}); see their output above; "
                           f"run the same command again to resume (pid {os.getpid()})")
