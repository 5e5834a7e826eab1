"""Scripted-LLM console sessions driving the simulated robot through the real sim and skills nodes.

Each asserts on the simulator's ground truth after the run and on the transcript layout."""

from __future__ import annotations

import pytest
from timing import pytest_timeout

from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import ConsoleSession, SessionConfig
from teachbot.console.tabletop_api import TabletopRobot
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.llm.scripted import ScriptedModel
from teachbot.sandbox.executor import SandboxExecutor

pytestmark = pytest.mark.timeout(pytest_timeout(180))

SCENE = """
objects:
  - {category: block, color: red, position: [-0.1, -0.45]}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
  - {category: bowl, color: yellow, position: [-0.12, -0.62]}
"""


@pytest.fixture()
def console(client):
    """A console bound to the tabletop API served by the running nodes, on a fresh scene."""
    reply = client.reset(scene_yaml=SCENE)
    assert reply.success, reply.message

    def objects():
        return {o.name: [o.pose.position.x, o.pose.position.y, o.pose.position.z] for o in client.world_state().objects}

    dialog = DialogChannel(timeout=5.0)
    api = RobotApi.load("tabletop")
    executor = SandboxExecutor(api.bind(TabletopRobot(client, objects, dialog).functions()), on_kill=client.cancel_all)

    def make(completions, functions=(), **config):
        model = ScriptedModel(completions)
        fn_model = ScriptedModel(functions) if functions else None
        session = ConsoleSession(executor, model, PromptBuilder.for_profile(api), function_model=fn_model,
                                 config=SessionConfig(**config))
        return session, model

    yield make, dialog
    executor.close()


def truth(client):
    return {o.name: o for o in client.world_state().objects}


def test_correct_session(console, client):
    make, dialog = console
    dialog.put_user("put the red block in the blue bowl")
    dialog.close()
    session, model = make([
        "get_obj_names()\n['invented block']",
        "put_first_on_second('red block', 'blue bowl')\n'success'\n>>> say('done')",
        "wait_for_trigger()",
    ])
    assert session.run() == "the person ended the session"
    assert session.transcript.render().splitlines()[:6] == [
        ">>> wait_for_trigger()",
        "{'type': 'dialog', 'text': 'put the red block in the blue bowl'}",
        ">>> get_obj_names()",
        "['blue bowl', 'green block', 'red block', 'yellow bowl']",
        ">>> put_first_on_second('red block', 'blue bowl')",
        "'success'",
    ]
    assert "invented" not in session.transcript.render()
    assert truth(client)["red block"].supported_by == "blue bowl"
    assert model.prompts[1].endswith("'blue bowl', 'green block', 'red block', 'yellow bowl']\n>>> ")


def test_wrong_object_name_corrected_after_the_hint(console, client):
    make, dialog = console
    dialog.put_user("put the green block in the yellow bowl")
    dialog.close()
    session, _ = make([
        "put_first_on_second('green cube', 'yellow bowl')",
        "put_first_on_second('green block', 'yellow bowl')",
        "wait_for_trigger()",
    ])
    session.run()
    lines = session.transcript.render().splitlines()
    assert lines[3].startswith("ValueError: unknown object 'green cube'; known: ")
    assert lines[4:6] == [">>> put_first_on_second('green block', 'yellow bowl')", "'success'"]
    assert truth(client)["green block"].supported_by == "yellow bowl"


def test_multi_line_for_loop(console, client):
    make, dialog = console
    dialog.put_user("put both blocks in the blue bowl")
    dialog.close()
    session, _ = make([
        "for name in ['red block', 'green block']:\n...     put_first_on_second(name, 'blue bowl')\n... \n",
        "wait_for_trigger()",
    ])
    session.run()
    assert session.transcript.render().splitlines()[2:4] == [
        ">>> for name in ['red block', 'green block']:",
        "...     put_first_on_second(name, 'blue bowl')",
    ]
    world = truth(client)
    transcript = session.transcript.render()
    assert world["red block"].supported_by == "blue bowl", transcript
    assert world["green block"].supported_by in ("blue bowl", "red block"), transcript


def test_undefined_helper_is_generated_and_used(console, client):
    make, dialog = console
    dialog.put_user("put all blocks in the yellow bowl")
    dialog.close()
    session, _ = make(
        ["put_blocks_in('yellow bowl')", "wait_for_trigger()"],
        functions=[
            "Here you go:\n```python\ndef put_blocks_in(bowl):\n    \"\"\"Put every block in bowl.\"\"\"\n"
            "    for name in block_names():\n        put_first_on_second(name, bowl)\n```",
            "def block_names():\n    return [n for n in get_obj_names() if n.endswith('block')]",
        ],
    )
    session.run()
    code = session.transcript.code()
    assert code[0] == "wait_for_trigger()"
    assert code[1].startswith("def block_names():")
    assert code[2].startswith("def put_blocks_in(bowl):")
    assert code[3] == "put_blocks_in('yellow bowl')"
    world = truth(client)
    transcript = session.transcript.render()
    assert world["red block"].supported_by in ("yellow bowl", "green block"), transcript
    assert world["green block"].supported_by in ("yellow bowl", "red block"), transcript


def test_prose_instead_of_code(console, client):
    make, dialog = console
    dialog.put_user("put the red block in the blue bowl")
    dialog.close()
    session, _ = make([
        "Sure! I will put the red block into the blue bowl now.",
        "put_first_on_second('red block', 'blue bowl')",
        "wait_for_trigger()",
    ])
    session.run()
    lines = session.transcript.render().splitlines()
    assert lines[3].startswith("SyntaxError:") and "prose goes in say(" in lines[3]
    assert truth(client)["red block"].supported_by == "blue bowl"


def test_a_looping_model_is_stopped(console, client):
    make, dialog = console
    dialog.put_user("what is on the table?")
    session, _ = make(["get_obj_names()"] * 10, loop_repeats=3)
    reason = session.run()
    assert reason.startswith("the model repeated 'get_obj_names()' 3 times")
    assert session.rounds == 3


def test_repeated_errors_give_up(console, client):
    make, dialog = console
    dialog.put_user("clean up")
    session, _ = make(["pick_up_everything_now(("] * 5, max_consecutive_errors=3)
    assert session.run() == "gave up after 3 SyntaxError errors in a row"
