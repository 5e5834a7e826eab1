"""The person's confirmation travels with a lesson to the store (issue 31, fleet trust): with a robot's own database
role, only a lesson its person confirmed may go to the fleet, so the flag must reach the fleet store's add()."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from teachbot.memory import EpisodicMemory, InteractionExample, MemoryConfig, MemoryStore

LESSON = InteractionExample(profile="tabletop", source="learned",
                            transcript=">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'put the red block in the blue bowl'}\n"
                                       ">>> put_first_on_second('red block', 'blue bowl')\n'success'\n>>> wait_for_trigger()")


class Recording(MemoryStore):
    """A store that adds in its own way (as the fleet store does) and records the confirmation it was given."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.confirmed: list[bool] = []

    def add(self, example: InteractionExample, confirmed: bool = False) -> str:
        self.confirmed.append(confirmed)
        return self._add(example)[0].id


class Words:
    name = "words"

    def embed(self, texts):
        import numpy as np

        return np.ones((len(texts), 4)) / 2.0


def test_the_episodic_memory_hands_the_confirmation_to_its_store(tmp_path):
    store = Recording(tmp_path / "learned")
    memory = EpisodicMemory.open(MemoryConfig(learned_dir=tmp_path / "learned", cache_dir=tmp_path / "cache"),
                                 embedder=Words())
    memory.store = store  # a fleet store in its place
    memory.add(LESSON, confirmed=True)
    memory.add(LESSON.replace(id=""), confirmed=False)
    assert store.confirmed == [True, False]


def test_the_memory_node_and_the_confirmed_path_carry_the_flag():
    pytest.importorskip("rclpy")
    from teachbot_interfaces.srv import AddExample

    from teachbot.nodes.confirmed_lessons import ConfirmedLessons
    from teachbot.nodes.memory_node import MemoryNode, to_msg

    # the interaction manager's side: a lesson the person confirmed goes to memory/add marked confirmed
    sent = []
    lessons = ConfirmedLessons.__new__(ConfirmedLessons)
    lessons.node = SimpleNamespace(get_logger=lambda: SimpleNamespace(info=lambda _line: None))
    lessons.memory = SimpleNamespace(service_is_ready=lambda: True)
    lessons._call = lambda _client, request, _timeout, _what: sent.append(request) or SimpleNamespace(
        success=True, message="stored as x", id="x")
    assert lessons.store(LESSON, 1.0).stored
    assert [r.confirmed for r in sent] == [True]
    # the memory node's side: memory/add hands the flag to the memory
    added = []
    node = SimpleNamespace(memory=SimpleNamespace(add=lambda example, confirmed=False: added.append(confirmed) or "x"),
                           _announce=lambda *_args: None)
    for confirmed in (True, False):
        response = MemoryNode.on_add(node, AddExample.Request(example=to_msg(LESSON), confirmed=confirmed),
                                     AddExample.Response())
        assert response.success, response.message
    assert added == [True, False]
