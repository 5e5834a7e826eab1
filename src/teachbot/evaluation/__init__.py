"""Benchmark evaluation: the Code-as-Policies tabletop tasks (one class per instruction template),
world states from the simulator's ground truth, and running experts' console code.

No ROS here: the harness node or test converts GetWorldState responses with ``WorldState.from_ros``.
"""

from __future__ import annotations

from teachbot.evaluation.benchmark import SPLITS, Benchmark, SuccessRules
from teachbot.evaluation.oracle import StatementResult, run_statements, transcript
from teachbot.evaluation.task import Episode, Task
from teachbot.evaluation.tasks_seen import (
    AllBlocksInBowl,
    AllBlocksOnPoint,
    BlockByDirectionToPoint,
    BlockByDistanceToPoint,
    BlockInBowl,
    BlockOnBlock,
    MatchingColors,
    NthBlockToPoint,
)
from teachbot.evaluation.tasks_unseen import (
    BlockBesideBowl,
    BlocksInLine,
    CornerByDistance,
    DifferentCorners,
    MismatchedColors,
    StackOnPoint,
)
from teachbot.evaluation.world_state import ObjectTruth, WorldState

# in the order of the benchmark's instruction lists
TASKS: tuple[type[Task], ...] = (
    BlockOnBlock, BlockInBowl, AllBlocksOnPoint, AllBlocksInBowl, MatchingColors,
    BlockByDirectionToPoint, BlockByDistanceToPoint, NthBlockToPoint,
    DifferentCorners, MismatchedColors, StackOnPoint, BlockBesideBowl, CornerByDistance, BlocksInLine,
)
TASKS_BY_KEY = {t.key: t for t in TASKS}


def tasks_for_split(split: str) -> list[type[Task]]:
    """The templates a split runs: the seen ones in SA-SI and UA-SI, the unseen ones in UA-UI."""
    return [t for t in TASKS if split in t.splits()]


__all__ = [
    "SPLITS", "TASKS", "TASKS_BY_KEY", "Benchmark", "Episode", "ObjectTruth", "StatementResult", "SuccessRules", "Task",
    "WorldState", "run_statements", "tasks_for_split", "transcript",
]
