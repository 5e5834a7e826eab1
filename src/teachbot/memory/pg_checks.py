"""What a lesson and a key embedding must be to enter the fleet memory, checked on write and again on read.

A lesson is code that every robot of the fleet may run, and the database is written by many robots, so a robot
trusts no row for being there (README: Fleet memory, trust): a lesson must be small (LIMITS), its transcript
console text that parses and calls only its profile's robot API (teachbot.sandbox.validate.transcript_problems,
the check the improver applies to improved transcripts), and a key embedding a finite unit vector of its model's
dimension, so that no row can outrank the others by its length. The schema (teachbot.memory.pg_trust) enforces
the sizes and the vectors on the server too; the content check needs Python, so it runs in every robot: on write
(``add`` refuses) and on read (the row is skipped and logged, as any unreadable row).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from teachbot.errors import ConfigError, MemoryStoreError
from teachbot.language.registry import RobotApi
from teachbot.memory.example import InteractionExample
from teachbot.sandbox.validate import transcript_problems


@dataclass(frozen=True)
class Limits:
    """How big a lesson may be (the server's CHECK constraints use the same numbers: pg_trust)."""

    transcript_chars: int = 32_000
    instructions: int = 32
    field_chars: int = 2_000  # each of problem, improvement, scope, episode_id, author_model, embedding_model, one instruction
    norm_tolerance: float = 1e-3  # |‖v‖ - 1| allowed of a key embedding (float32 rounding of a normalised vector)


LIMITS = Limits()
_SHORT_FIELDS = ("problem", "improvement", "scope", "episode_id", "author_model", "embedding_model", "created")


def lesson_problems(example: InteractionExample) -> list[str]:
    """Every reason ``example`` may not enter (or be read from) the fleet memory; empty when it may."""
    problems: list[str] = []
    if len(example.transcript) > LIMITS.transcript_chars:
        problems.append(f"the transcript has {len(example.transcript)} characters (at most {LIMITS.transcript_chars})")
    if len(example.instructions) > LIMITS.instructions:
        problems.append(f"it has {len(example.instructions)} instructions (at most {LIMITS.instructions})")
    for name in _SHORT_FIELDS:
        if len(getattr(example, name)) > LIMITS.field_chars:
            problems.append(f"'{name}' has more than {LIMITS.field_chars} characters")
    if any(len(text) > LIMITS.field_chars for text in example.instructions):
        problems.append(f"an instruction has more than {LIMITS.field_chars} characters")
    if problems:  # too big to parse: say so, parse nothing
        return problems
    return list(_content_problems(example.profile, example.transcript))


def check_lesson(example: InteractionExample) -> None:
    """MemoryStoreError naming every problem of ``lesson_problems``."""
    problems = lesson_problems(example)
    if problems:
        raise MemoryStoreError(f"example {example.id!r} is not a lesson the fleet may run: {'; '.join(problems)}")


@functools.lru_cache(maxsize=4096)
def _content_problems(profile: str, transcript: str) -> tuple[str, ...]:
    """transcript_problems against the profile's API (cached: a catch-up reads each row once per process, retries too)."""
    try:
        api = _api(profile)
    except ConfigError:
        return (f"{profile!r} is not a robot API profile of this teachbot",)
    return tuple(transcript_problems(transcript, api))


@functools.lru_cache(maxsize=16)
def _api(profile: str) -> RobotApi:
    if not profile or "/" in profile or profile.startswith("."):
        raise ConfigError(f"invalid profile {profile!r}")
    return RobotApi.load(profile)


def vector_problem(row: np.ndarray, dim: int = 0) -> str:
    """Why one key embedding may not be stored or trusted ('' when it may): not finite, not of length 1, or not
    ``dim`` values (0: any dimension)."""
    values = np.asarray(row, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        return f"an embedding must be a non-empty vector, got shape {values.shape}"
    if dim and values.size != dim:
        return f"an embedding of {values.size} values where the model's have {dim}"
    if not np.all(np.isfinite(values)):
        return "an embedding holds NaN or infinite values"
    norm = float(np.linalg.norm(values))
    if not math.isclose(norm, 1.0, abs_tol=LIMITS.norm_tolerance):
        return f"an embedding of length {norm:.4g} (key embeddings are normalised to length 1)"
    return ""


def check_vectors(model: str, rows: np.ndarray, dim: int = 0) -> None:
    """MemoryStoreError when a row of ``rows`` (one key embedding each) fails ``vector_problem``."""
    matrix = np.asarray(rows)
    if matrix.ndim != 2:
        raise MemoryStoreError(f"embedder {model!r}: expected one row per key, got shape {matrix.shape}")
    for row in matrix:
        problem = vector_problem(row, dim or matrix.shape[1])
        if problem:
            raise MemoryStoreError(f"embedder {model!r}: {problem}; nothing was stored")


def score_problem(score: float) -> str:
    """Why a similarity the database computed cannot come from two unit vectors ('' when it can)."""
    if not math.isfinite(score):
        return f"a similarity of {score}"
    if abs(score) > 1.0 + 4 * LIMITS.norm_tolerance:
        return f"a similarity of {score:.4g}: its key embedding is not of length 1"
    return ""
