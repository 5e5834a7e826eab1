"""Each benchmark task's scripted expert, run as console code through the tabletop robot API against
the real sim and skills nodes, must leave a world state that the task's own success check accepts.

The normal run tries EXPERT_SCENES (default 3) sampled scenes per template; the issue's full check,
48 of 50 scenes per template (~700 pick-and-places, ~25-35 minutes), is marked ``slow`` and runs only when
asked for: ``pytest -m slow test/test_eval_experts.py`` (or TEACHBOT_SLOW_TESTS=1).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.console.tabletop_api import TabletopRobot
from teachbot.evaluation import TASKS, Benchmark, Episode, Task, WorldState, run_statements, transcript
from teachbot.language.dialog import DialogChannel
from teachbot.world.scene import TabletopConfig

EXPERT_SCENES = int(os.environ.get("TEACHBOT_EXPERT_SCENES", "3"))
FULL_SCENES, FULL_REQUIRED = 50, 48


@dataclass
class Outcome:
    episode: Episode
    success: bool
    diagnosis: str
    console: str
    seconds: float


def episodes(task: type[Task], n: int, seed: int) -> list[Episode]:
    """n episodes, the task's splits taken in turn, from one seeded generator per template."""
    rng = np.random.default_rng([seed, TASKS.index(task)])
    bench, table = Benchmark.load(), TabletopConfig.load()
    splits = task.splits()
    return [task.sample(rng, splits[i % len(splits)], bench, table) for i in range(n)]


def run_expert(client, episode: Episode) -> Outcome:
    start = time.monotonic()
    reply = client.reset(scene_yaml=episode.scene_yaml())
    assert reply.success, reply.message
    initial = WorldState.from_ros(client.world_state())

    def objects():
        return {o.name: [o.pose.position.x, o.pose.position.y, o.pose.position.z] for o in client.world_state().objects}

    robot = TabletopRobot(client, objects, DialogChannel(timeout=1.0), episode.task.table)
    results = run_statements(episode.task.oracle(initial), robot.functions())
    final = WorldState.from_ros(client.world_state())
    return Outcome(episode, episode.task.success(initial, final), episode.task.diagnose(initial, final),
                   transcript(results), time.monotonic() - start)


def report(task: type[Task], outcomes: list[Outcome]) -> str:
    solved = sum(o.success for o in outcomes)
    lines = [f"{task.key}: expert solved {solved}/{len(outcomes)} scenes in {sum(o.seconds for o in outcomes):.0f} s"]
    for o in outcomes:
        if not o.success:
            lines += [f"  [{o.episode.split}] {o.episode.instruction}: {o.diagnosis}",
                      *(f"    {line}" for line in o.console.splitlines()),
                      "    scene: " + ", ".join(f"{s.name} ({s.position[0]:.3f}, {s.position[1]:.3f})" for s in o.episode.scene.objects)]
    return "\n".join(lines)


@pytest.mark.timeout(pytest_timeout(60 + 60 * EXPERT_SCENES))
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.key)
def test_expert_solves_sampled_scenes(task, client):
    outcomes = [run_expert(client, e) for e in episodes(task, EXPERT_SCENES, seed=1)]
    text = report(task, outcomes)
    print(text)
    assert all(o.success for o in outcomes), text


@pytest.mark.slow
@pytest.mark.timeout(pytest_timeout(60 + 20 * FULL_SCENES))
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.key)
def test_expert_solves_48_of_50_scenes(task, client):
    outcomes = [run_expert(client, e) for e in episodes(task, FULL_SCENES, seed=2)]
    text = report(task, outcomes)
    print(text)
    assert sum(o.success for o in outcomes) >= FULL_REQUIRED, text
