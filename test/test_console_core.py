"""Console core without ROS or a sandbox: transcript, completion splitting, registry, prompt layout."""

from __future__ import annotations

import pytest

from teachbot.console.prompt import PromptBuilder
from teachbot.console.session import extract_definition, undefined_calls
from teachbot.errors import ConfigError
from teachbot.language.prompts import CURRENT_HEADER, EXAMPLE_HEADER
from teachbot.language.registry import NotAvailableError, RobotApi
from teachbot.language.reply import read_reply
from teachbot.language.transcript import Transcript

TEXT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the red block in the blue bowl'}
>>> for name in ['red block']:
...     put_first_on_second(name, 'blue bowl')
>>> say('done')
>>> ask('which bowl?')
{'type': 'dialog', 'text': 'the green one'}"""


def test_transcript_round_trip_and_instructions():
    transcript = Transcript.parse(TEXT)
    assert transcript.render() == TEXT
    assert [e.kind for e in transcript.entries] == ["code", "output", "code", "code", "code", "output"]
    assert transcript.entries[2].text == "for name in ['red block']:\n    put_first_on_second(name, 'blue bowl')"
    assert transcript.instructions() == ["put the red block in the blue bowl", "the green one"]


@pytest.mark.parametrize(
    ("completion", "source", "dropped"),
    [
        ("get_obj_names()\n['red block']\n", "get_obj_names()", "['red block']"),
        (" get_obj_names()", "get_obj_names()", ""),
        ("for n in names:\n...     say(n)\n... \n'ok'", "for n in names:\n    say(n)", "'ok'"),
    ],
)
def test_the_reply_reader_keeps_the_statement_and_drops_invented_output(completion, source, dropped):
    reply = read_reply(completion)
    assert reply.error == ""
    assert reply.statements[0] == source
    assert reply.dropped.strip() == dropped


@pytest.mark.parametrize(("completion", "error"), [("", "EmptyCompletion"), ("   \n", "EmptyCompletion"),
                                                   ("I will now pick the block.", "SyntaxError")])
def test_the_reply_reader_reports_non_code(completion, error):
    assert read_reply(completion).error.startswith(error)


def test_registry_generates_the_import_block_for_both_profiles():
    tabletop, household = RobotApi.load("tabletop"), RobotApi.load("household")
    assert tabletop.names == ["wait_for_trigger", "get_obj_names", "get_obj_pos", "denormalize_xy",
                              "put_first_on_second", "check_action", "say", "ask", "learn_from_interaction"]
    assert {"list_objects", "list_locations", "get_location_coordinates", "move_to", "grasp", "place_object",
            "handover_object_to_human", "point_at", "open", "close", "toggle", "slice", "wipe", "get_object_state", "check_action",
            "say", "ask", "wait_for_trigger", "learn_from_interaction", "begin_task", "current_tasks", "retrieve_working_memory",
            "retrieve_declarative_memory"} == set(household.names)
    block = tabletop.import_block()
    assert "def put_first_on_second(obj_name: str, target: str | list[float], **params: float) -> str:" in block
    assert "def open(thing: str, *, pull_distance: float = 0.32) -> str:" in household.import_block()
    assert all(f"def {name}(" in block for name in tabletop.names)


def test_unbound_functions_fail_at_once_with_a_reason():
    api = RobotApi.load("tabletop")
    bound = api.bind({"say": print}, {"learn_from_interaction": "the improvement node is not running"})
    with pytest.raises(NotAvailableError, match=r"learn_from_interaction\(\) is not available: the improvement node"):
        bound["learn_from_interaction"]()
    with pytest.raises(NotAvailableError, match="not available"):
        bound["get_obj_names"]()
    with pytest.raises(ConfigError, match="undeclared robot functions"):
        api.bind({"fly": print})


def test_prompt_puts_static_text_first_and_the_most_similar_example_last():
    class Examples:
        def examples(self, profile, instructions, k):
            assert instructions == ["stack the blocks"]
            return [">>> say('least similar')", ">>> say('most similar')"]

    api = RobotApi.load("tabletop")
    builder = PromptBuilder.for_profile(api, Examples(), k=2)
    transcript = Transcript.parse(">>> wait_for_trigger()\n{'type': 'dialog', 'text': 'stack the blocks'}")
    prompt = builder.build(transcript)
    assert prompt.startswith(builder.base())
    assert api.import_block() in prompt
    assert prompt.index("least similar") < prompt.index("most similar") < prompt.index(CURRENT_HEADER)
    assert prompt.count(EXAMPLE_HEADER) == 2
    assert prompt.endswith("{'type': 'dialog', 'text': 'stack the blocks'}\n>>> ")
    empty = PromptBuilder.for_profile(api).build(Transcript())
    assert empty.endswith(f"{CURRENT_HEADER}\n>>> ")


def test_undefined_calls_and_definition_extraction():
    assert undefined_calls("x = helper(get_obj_names())", {"get_obj_names"}) == {"helper"}
    assert undefined_calls("def f():\n    return g()\nf()", set()) == {"g"}
    text = "Sure:\n>>> def helper(a):\n...     return [a]\nhelper(1)"
    assert extract_definition(text, "helper") == "def helper(a):\n    return [a]"
    assert extract_definition("def other():\n    pass", "helper") is None
    assert extract_definition("def helper(:\n    pass", "helper") is None
