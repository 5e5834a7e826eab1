"""What the fleet memory's store (teachbot.memory.pg_store) reads and writes besides SQL: lessons from rows, checked
as every robot checks them (teachbot.memory.pg_checks), the spool's record of a lesson, and the changes it reports.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from teachbot.errors import MemoryStoreError
from teachbot.memory.example import InteractionExample, validate_learned
from teachbot.memory.pg_checks import check_lesson
from teachbot.memory.pg_schema import example_from_row
from teachbot.storage.spool import SpoolFormat

log = logging.getLogger("teachbot.memory.pg_store")  # its lines are the store's


def decode_lesson(data: object, where: str) -> InteractionExample:
    """A spooled lesson from its JSON object (MemoryStoreError when it is none)."""
    example = InteractionExample.from_dict(data, where)
    validate_learned(example)
    return example.with_derived_instructions()


LESSONS = SpoolFormat[InteractionExample](
    field="example", encode=InteractionExample.to_dict, decode=decode_lesson, id=lambda e: e.id,
    created=lambda e: e.created, what="memory spool", error=MemoryStoreError)


def confirmed_mark(confirmed: bool) -> str:
    """The ``confirmed`` column's value for a lesson its person did (or did not) confirm."""
    return "person" if confirmed else ""


def read_lesson(row: Sequence[object]) -> InteractionExample:
    """The lesson of a row's EXAMPLE_COLUMNS, checked as on write; MemoryStoreError (or TypeError, ValueError) when
    the row is not one this robot may run."""
    example = example_from_row(tuple(row))
    validate_learned(example)
    check_lesson(example)
    return example


@dataclass(frozen=True)
class StoreChange:
    """Examples that others (robots, processes) added or removed, as this store caught up with them; also a queued
    lesson of this store's that the database refused (its id holds another example) is ``removed``."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class PoisonLog:
    """The rows skipped as unreadable or untrusted: one error line per row version, never an exception for a reader."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._told: set[tuple[str, int]] = set()

    def skip(self, example_id: str, seq: int, exc: Exception) -> None:
        if (example_id, seq) not in self._told:
            self._told.add((example_id, seq))
            log.error("memory store: skipping the row %r (seq %d) of the database at %s: it is not a readable lesson (%s); "
                      "its robot or an operator (`teachbot memory remove --any-robot %s`) deletes it", example_id, seq,
                      self.where, exc, example_id)
