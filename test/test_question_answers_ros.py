"""A page's answer carries its question's id, end to end through the real nodes (issue 31, item 2).

The interaction manager with the approval gate on (``put_first_on_second: always``) and a scripted model that tries
the same motion twice, the web node in front of it, and the page's messages as the page sends them (parsed by
teachbot.web.protocol, handled by the hub). The person refuses the first question with its button; the second
question gets a late "yes" still carrying the first question's id (a double click on the old Approve button, a
second tab showing the old question) and then a "no" carrying its own id. The stale "yes" is not the second
question's answer: the motion is refused with the person's "no" and the robot never runs it.
"""

from __future__ import annotations

import json

import pytest
from ros_graph import Graph, wait_until
from teachbot_interfaces.msg import DialogTurn, TranscriptUpdate
from test_approval_gate import gate_config
from timing import pytest_timeout

from teachbot.language.dialog import turn_question
from teachbot.llm.scripted import ScriptedModel
from teachbot.nodes.common import COMMAND_QOS, TRANSCRIPT_QOS
from teachbot.nodes.interaction_manager_node import InteractionManagerNode
from teachbot.nodes.web_node import WebNode
from teachbot.web.protocol import Limits, parse

pytestmark = pytest.mark.timeout(pytest_timeout(600))
READY = 300.0  # seconds until a console without a memory node reads its first words (test_interaction_manager.READY)
CALL = "put_first_on_second('red block', 'blue bowl')"


def page(web: WebNode, message: dict[str, str]) -> None:
    """One message of the page, as its WebSocket delivers it."""
    assert web.hub.handle(parse(json.dumps(message), Limits())) == []


def outcomes(lines: list[str]) -> list[str]:
    """The motions' outcome lines: refused by the gate, or let through to a robot with no skills node here."""
    return [line for line in lines if "was not approved" in line or "is not available" in line]


def test_a_stale_answer_from_the_page_does_not_answer_a_newer_question(ros_context, tmp_path):
    model = ScriptedModel([CALL, CALL, "wait_for_trigger()"])
    manager = InteractionManagerNode(interaction_model=model, function_model=ScriptedModel([]), dialog_timeout=READY,
                                     approval=str(gate_config(tmp_path, "tabletop", {"put_first_on_second": "always"})))
    web = WebNode(port=0, confirm_lessons="false")
    graph = Graph(manager, web, name="question_ids")
    questions: list[tuple[str, str]] = []
    lines: list[str] = []
    graph.probe.create_subscription(DialogTurn, "/dialog/robot",
                                    lambda m: questions.append(turn_question(m.type)) if m.type != "dialog" else None,
                                    COMMAND_QOS)
    graph.probe.create_subscription(TranscriptUpdate, "/interaction/transcript", lambda m: lines.extend(m.lines),
                                    TRANSCRIPT_QOS)
    try:
        wait_until(lambda: web.words.get_subscription_count() > 0, 30, "the manager on dialog/user")
        page(web, {"type": "say", "text": "put the red block in the blue bowl"})
        wait_until(lambda: len(questions) == 1, READY, "the first approval question")
        kind, first = questions[0]
        assert kind == "approval" and first
        page(web, {"type": "answer", "question": first, "text": "no"})  # the Refuse button under the first question
        wait_until(lambda: len(questions) == 2, 60, "the second approval question")
        second = questions[1][1]
        assert second != first
        page(web, {"type": "answer", "question": first, "text": "yes"})  # late, with the first question's id
        page(web, {"type": "answer", "question": second, "text": "no"})
        wait_until(lambda: len(outcomes(lines)) == 2, 60, "both motions' outcomes")
        assert all("was not approved" in line and "the person said: 'no'" in line for line in outcomes(lines)), lines
        assert [line for line in lines if line.startswith(">>> ")][:3] == [">>> wait_for_trigger()", f">>> {CALL}",
                                                                            f">>> {CALL}"]
    finally:
        graph.close()
