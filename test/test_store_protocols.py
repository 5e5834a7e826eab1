"""One Store protocol per kind: every backend offers each member of its kind's protocol, with the same
parameters, so the memory node, the commands and the migrations can take either."""

from __future__ import annotations

import inspect

import pytest

from teachbot.knowledge.pg_store import PgKnowledgeStore
from teachbot.knowledge.store import KnowledgeStore
from teachbot.knowledge.store_protocol import KnowledgeBase
from teachbot.memory.pg_store import PgMemoryStore
from teachbot.memory.store import MemoryStore
from teachbot.memory.store_protocol import ExampleStore
from teachbot.taskmemory.log import TaskLogStore
from teachbot.taskmemory.pg_log import PgTaskLogStore

KINDS = [(ExampleStore, (MemoryStore, PgMemoryStore)), (KnowledgeBase, (KnowledgeStore, PgKnowledgeStore))]


def _members(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


@pytest.mark.parametrize(("protocol", "store"), [(p, s) for p, stores in KINDS for s in stores],
                         ids=lambda x: x.__name__)
def test_every_backend_offers_its_kinds_protocol(protocol, store):
    members = _members(protocol)
    assert len(members) >= 10
    for name in members:
        wanted, have = inspect.getattr_static(protocol, name), inspect.getattr_static(store, name, None)
        assert have is not None, f"{store.__name__} lacks {protocol.__name__}.{name}"
        assert isinstance(have, property) == isinstance(wanted, property), f"{store.__name__}.{name}: property or not"
        if not isinstance(wanted, property):
            assert list(inspect.signature(have).parameters) == list(inspect.signature(wanted).parameters), \
                f"{store.__name__}.{name} takes other parameters than {protocol.__name__}.{name}"


def test_the_check_finds_a_backend_that_lacks_a_member():
    class Partial:
        version = property(lambda self: 0)

        def get(self, example_id: str) -> None: ...

    missing = [n for n in _members(ExampleStore) if inspect.getattr_static(Partial, n, None) is None]
    assert "add" in missing and "version" not in missing


def test_the_task_logs_on_postgres_are_task_logs():
    assert issubclass(PgTaskLogStore, TaskLogStore)
