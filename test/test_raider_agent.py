"""The RAIDER agent offline. The paper profile (the default): a scripted agent that decides from the tool responses
in its prompt reaches the right verdict through several real tool calls per turn; each of the program flow
manager's four warnings, in text and in native tool calling, is triggered by a scripted reply and handled; arguments
by name; the Figure 4 prompt. The guided profile (a labelled ablation) keeps teachbot's earlier behaviour; limits;
the ablations."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from teachbot.errors import ConfigError
from teachbot.llm.base import SYSTEM_END, ChatReply, Completion, ToolCallRequest
from teachbot.llm.scripted import ScriptedModel
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.household import HouseholdPerception, ThingStatus, WorldThing
from teachbot.raider.agent import RaiderAgent, build_system_prompt
from teachbot.raider.config import RaiderConfig
from teachbot.raider.pfm import WARN_MADE_UP_RESPONSE, WARN_MISSING, parse_call, read_turn
from teachbot.raider.tools import GroundedTools, Reach


def thing(name, kind, x, y, z, size=(0.06, 0.06, 0.1)):
    return WorldThing(name, kind, "", np.array([x, y, z]), np.array(size))


def kitchen(held: str = "") -> GroundedTools:
    perception = HouseholdPerception(PerceptionConfig.load("perception_household"))
    things = [
        thing("plate", "plate", 1.05, 0.2, 0.76, (0.2, 0.2, 0.02)),
        thing("banana", "banana", 1.05, 0.2, 0.79, (0.18, 0.04, 0.04)),
        thing("apple", "apple", 1.05, 0.6, 0.79, (0.08, 0.08, 0.08)),
        thing("red cup", "cup", 3.0, -1.1, 0.945, (0.065, 0.065, 0.09)),
        thing("blue cup", "cup", 3.0, -1.4, 0.945, (0.065, 0.065, 0.09)),
    ]
    status = {n: ThingStatus(held=n == held) for n in ("plate", "banana", "apple", "red cup", "blue cup")}
    perception.update(things, 1.0, perception.layout.location_pose("table"), {}, status)
    return GroundedTools(perception.queries, Reach(0.85, mobile=True), layout=perception.layout)


CONFIG = RaiderConfig(prompt="QGEN_GRND", time_limit=20.0, max_turns=8)
GUIDED = RaiderConfig(prompt="QGEN_GRND", profile="guided", examples=True, time_limit=20.0, max_turns=8)


def paper_turns(prompt: str) -> tuple[str, list[str], dict[str, str], list[str]]:
    """The query, the object list, the tool responses by tool and the warnings of the check in a paper-profile prompt."""
    convo = prompt.split(SYSTEM_END, 1)[1]
    query = convo.split("Action query:", 1)[1].split("\n", 1)[0].strip()
    objects = json.loads(re.search(r"^Objects in the scene: (.*)$", convo, re.M).group(1))["objects"]
    answers = dict(re.findall(r"^Tool response: Call to tool (\w+) with args .*? returned (.*)$", convo, re.M))
    return query, objects, answers, re.findall(r"^(Warning \d.*)$", convo, re.M)


def careful_agent(prompt: str) -> str:
    """A double for the paper profile that decides from its prompt, never from an answer key: the object list of the
    first message grounds the query; then two calls in one turn (the hand, what is on the object); then the verdict."""
    query, objects, answers, _ = paper_turns(prompt)
    target = re.sub(r"^\w+\((.*)\)$", r"\1", query).strip("'\" ")
    fits = [o for o in objects if target in o]
    if target not in objects and len(fits) > 1:
        return "Several objects fit.\n" + json.dumps({"final_response": "ambiguity", "grounding": fits,
                                                      "explanation": f"'{target}' could be {' or '.join(fits)}."})
    if target not in objects:
        return json.dumps({"final_response": "unfeasibility", "explanation": f"There is no {target}.", "grounding": []})
    if "robot_holding" not in answers:
        return (f"Questions: is the hand free? Is anything on the {target}?\ncall_tool{{\"tool\": \"robot_holding\", \"args\": []}}\n"
                f'call_tool{{"tool": "check_obj_relationship", "args": ["on top of", "{target}"]}}')
    if "holds nothing" not in answers["robot_holding"]:
        return json.dumps({"final_response": "unfeasibility", "explanation": answers["robot_holding"] + " The hand is full.",
                           "grounding": [target]})
    on_top = answers["check_obj_relationship"]
    verdict = ("unfeasibility", on_top) if not on_top.startswith("Nothing") else ("none", f"The {target} can be picked.")
    return "```json\n" + json.dumps({"final_response": verdict[0], "explanation": verdict[1], "grounding": [target]}) + "\n```"


def guided_agent(prompt: str) -> str:
    """A double that follows the procedure and decides from the tool responses in its prompt (not
    from the answer key): detect, check the hand, check what is on top, then judge. It writes like
    chat models do: prose first, the call in backticks or a JSON block in a fence."""
    convo = prompt.split(SYSTEM_END, 1)[1].split("Action query:", 1)[1]  # the current check, not the example
    query = convo.split("\n", 1)[0].strip()
    target = re.sub(r"^\w+\((.*)\)$", r"\1", query).strip("'\" ")
    responses = re.findall(r"Tool response: (.*)", convo)
    if not responses:
        return f"Ground: the query names the {target}. Let me see what is there.\nTool call: `object_detection()`"
    objects = json.loads(responses[0])["objects"]
    fits = [o for o in objects if target in o]
    if target not in objects and len(fits) > 1:
        return ("Several objects fit.\nFinal response:\n```json\n" + json.dumps({
            "final_response": "ambiguity", "explanation": f"'{target}' could be {' or '.join(fits)}.",
            "grounding": fits}) + "\n```")
    if target not in objects:
        return 'Final response: {"final_response": "unfeasibility", "explanation": "There is no ' + target + '.", "grounding": []}'
    if len(responses) == 1:
        return "Question: is the hand free?\nTool call: robot_holding()"
    if "holds nothing" not in responses[1]:
        return json.dumps({"final_response": "unfeasibility", "explanation": responses[1] + " The hand is full.",
                           "grounding": [target]})
    if len(responses) == 2:
        return f'Question: is anything on top of it?\nTool call: check_obj_relationship("on top of", "{target}")'
    if not responses[2].startswith("Nothing"):
        return "Final response: " + json.dumps({"final_response": "unfeasibility", "explanation": responses[2],
                                                "grounding": [target]})
    return "Final response: " + json.dumps({"final_response": "none", "explanation": f"The {target} can be picked.",
                                            "grounding": [target]})


@pytest.mark.parametrize(("query", "held", "verdict", "fact"), [
    ("pick(apple)", "", "none", "apple"),
    ("pick(plate)", "", "unfeasibility", "banana is on top of plate"),
    ("pick(cup)", "", "ambiguity", "red cup or blue cup"),
    ("pick(kettle)", "", "unfeasibility", "no kettle"),
    ("pick(apple)", "banana", "unfeasibility", "holding banana"),
])
def test_guided_a_scripted_agent_reaches_the_verdict_through_real_tool_calls(query, held, verdict, fact):
    model = ScriptedModel(respond=guided_agent, stop=())
    result = RaiderAgent(model, kitchen(held), "household", GUIDED).check(query)
    assert result.final_response == verdict, result.transcript
    assert fact in result.explanation
    assert result.tool_calls and all(c.ok for c in result.tool_calls) and not result.warnings
    assert result.tool_calls[0].name == "object_detection"
    assert "Tool response:" in result.transcript  # the tools answered, not the model


class IgnoresStop(ScriptedModel):
    """A server that ignores the stop string and lets the model run on."""

    def generate(self, prompt, stop=None, **kwargs):
        return super().generate(prompt, stop=(), **kwargs)


def test_guided_each_warning_is_triggered_and_handled():
    replies = [
        # 1. made up tool response (and a fabricated observation following it)
        "Tool call: robot_holding()\ntool response: The robot is holding the apple.\nFinal response: "
        '{"final_response": "unfeasibility", "explanation": "hand full"}',
        # 2. made up tool name
        "I will look around.\nTool call: scan_room()",
        # 3. unsuccessful tool call (unknown object)
        "Tool call: get_obj_state('kettle')",
        # 4. neither a tool call nor a final response
        "The apple is probably fine to pick.",
        # an invalid final response
        'Final response: {"final_response": "maybe", "explanation": "?"}',
        'Final response: {"final_response": "none", "explanation": "The hand is free and nothing is on the apple.", '
        '"grounding": ["apple"]}',
    ]
    model = IgnoresStop(replies)
    result = RaiderAgent(model, kitchen(), "household", GUIDED).check("pick(apple)")
    assert result.final_response == "none" and result.turns == 6
    w = result.warnings
    assert w[0] == WARN_MADE_UP_RESPONSE
    assert w[1].startswith("There is no tool 'scan_room'")
    assert w[2].startswith("The tool call get_obj_state('kettle') failed: no object or place called 'kettle'")
    assert w[3] == WARN_MISSING
    assert w[4].startswith("Your final response is not valid: final_response must be one of")
    # the made-up response was cut and the real one given; each warning reached the model's next prompt
    assert "holding the apple" not in model.prompts[1]
    assert "Tool response: The robot's hand is empty" in model.prompts[1]
    for i, warning in enumerate(w, start=1):
        assert f"Warning: {warning}" in model.prompts[i]
    assert [c.ok for c in result.tool_calls] == [True, False, False]


def test_turn_and_time_limits_end_a_check_without_a_verdict():
    chatter = ScriptedModel(respond=lambda p: "Tool call: robot_holding()", stop=())
    result = RaiderAgent(chatter, kitchen(), "household", RaiderConfig(max_turns=3)).check("pick(apple)")
    assert result.final_response == "" and result.stopped == "turn_limit" and result.turns == 3
    ticks = itertools.count(0.0, 8.0)  # each clock reading 8 s later: the third turn starts past 20 s
    result = RaiderAgent(chatter, kitchen(), "household", RaiderConfig(time_limit=20.0), clock=lambda: next(ticks)).check("pick(apple)")
    assert result.stopped == "time_limit" and "20 s" in result.explanation and result.turns < 3
    assert RaiderConfig().max_turns == 0 and RaiderConfig.load().max_turns == 0  # the paper's: the time limit alone
    ticks = itertools.count(0.0, 0.25)  # no turn limit: a chatty model runs until the time limit
    result = RaiderAgent(chatter, kitchen(), "household", RaiderConfig(), clock=lambda: next(ticks)).check("pick(apple)")
    assert result.stopped == "time_limit" and result.turns > 12


def test_parsing_the_forms_models_write():
    assert parse_call("dist_to_target(apple)") == ("dist_to_target", ["apple"])
    assert parse_call('`check_obj_relationship("on top of", "plate")`') == ("check_obj_relationship", ["on top of", "plate"])
    assert parse_call("get_obj_state(obj='red cup')") == ("get_obj_state", ["red cup"])
    turn = read_turn("Let me check.\n```\nsome text\n```\nTool call: robot_holding()\nand then more")
    assert turn.call == ("robot_holding", []) and turn.text.endswith("Tool call: robot_holding()")
    turn = read_turn('<think>the hand...</think>\n```json\n{"final_response": "none", "explanation": "ok"}\n```')
    assert turn.final == {"final_response": "none", "explanation": "ok"}
    assert read_turn("Observation: fine").warnings[0] == WARN_MADE_UP_RESPONSE


@pytest.mark.parametrize("ablation", ["BASIC", "QGEN", "GRND", "QGEN_GRND"])
def test_guided_the_ablations_change_the_procedure(ablation):
    prompt = build_system_prompt("tabletop", RaiderConfig(prompt=ablation, profile="guided"))
    assert ("1. Ground:" in prompt) == ("GRND" in ablation)
    assert ("Ask: write the precondition questions" in prompt) == ("QGEN" in ablation)
    assert "check_obj_relationship(relationship, obj)" in prompt and "blocks and bowls" in prompt


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="raider.prompt must be one of"):
        RaiderConfig(prompt="FULL")
    with pytest.raises(ConfigError, match="raider.guard.tabletop must be one of"):
        RaiderConfig.from_mapping({"raider": {"guard": {"tabletop": "loud"}}})
    assert RaiderConfig.load().guard_mode("household") == "off"
    cfg = RaiderConfig(tool_calling_by_model={"gpt-4o*": "native"})
    assert cfg.tool_calling_for("gpt-4o-mini") == "native" and cfg.tool_calling_for("llama3") == "text"
    with pytest.raises(ConfigError, match="no native tool calling"):
        RaiderAgent(ScriptedModel([]), kitchen(), "household", RaiderConfig(tool_calling="native"))


class NativeDouble:
    """A ToolChatModel double: answers with native tool calls decided from the tool messages so far."""

    name = "native-double"

    def __init__(self) -> None:
        self.seen: list[list[dict]] = []

    def chat_tools(self, messages, tools, *, timeout=None):
        self.seen.append(list(messages))
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        done = Completion("", self.name, "", 0, 0, 0.0)
        if not tool_msgs:
            return ChatReply("", (ToolCallRequest("c1", "check_obj_relationship", '{"relationship": "on top of", "obj": "plate"}'),), done)
        if len(tool_msgs) == 1:
            return ChatReply("", (ToolCallRequest("c2", "get_obj_state", '{"obj": "kettle"}'),), done)
        fact = tool_msgs[0]["content"]
        args = json.dumps({"final_response": "unfeasibility", "explanation": fact, "grounding": ["plate"]})
        return ChatReply("", (ToolCallRequest("c3", "final_response", args),), done)


def test_guided_native_tool_calling():
    model = NativeDouble()
    result = RaiderAgent(model, kitchen(), "household", RaiderConfig(tool_calling="native", profile="guided")).check("pick(plate)")
    assert result.final_response == "unfeasibility" and result.explanation == "banana is on top of plate."
    assert result.grounding == ["plate"] and len(result.warnings) == 1 and "kettle" in result.warnings[0]
    last = model.seen[-1]
    assert last[0]["role"] == "system" and "final_response" in last[0]["content"]
    assert any(m["role"] == "tool" and m["tool_call_id"] == "c2" and m["content"].startswith("Warning:") for m in last)


# ---------------------------------------------------------------------- the paper profile (the default)
@pytest.mark.parametrize(("query", "held", "verdict", "fact"), [
    ("pick(apple)", "", "none", "apple"),
    ("pick(plate)", "", "unfeasibility", "banana is on top of plate"),
    ("pick(cup)", "", "ambiguity", "red cup or blue cup"),
    ("pick(kettle)", "", "unfeasibility", "no kettle"),
    ("pick(apple)", "banana", "unfeasibility", "holding banana"),
])
def test_a_scripted_agent_reaches_the_verdict_with_several_calls_per_turn(query, held, verdict, fact):
    assert RaiderConfig().profile == "paper" and RaiderConfig.load().profile == "paper"  # the default
    model = ScriptedModel(respond=careful_agent, stop=())
    result = RaiderAgent(model, kitchen(held), "household", CONFIG).check(query)
    assert result.final_response == verdict, result.transcript
    assert fact in result.explanation and not result.warnings
    first = model.prompts[0].split(SYSTEM_END, 1)[1]
    assert first.startswith(f"Action query: {query}\nObjects in the scene: ") and '"red cup"' in first  # the object list
    if verdict != "ambiguity" and "kettle" not in query:
        assert result.turns == 2 and [c.name for c in result.tool_calls] == ["robot_holding", "check_obj_relationship"]
        assert "Tool response: Call to tool robot_holding with args [] returned " in result.transcript  # in order
        assert result.transcript.index("robot_holding with args") < result.transcript.index("check_obj_relationship with")


def test_the_paper_prompt_is_figure_4_zero_shot_with_the_reach_stated():
    prompt = build_system_prompt("household", CONFIG, reach=Reach(0.85, mobile=True))
    for section in ("Task Objective", "Procedure Steps", "Tool Description", "Constraints", "Tool Call Instructions"):
        assert f"\n{section}\n" in f"\n{prompt}"
    assert "1. GROUND - Instance Grounding" in prompt and "2. ASK - Question Generation" in prompt
    assert "Based on tool responses and common sense" in prompt and "0.85 m reach" in prompt
    assert "call_tool{" in prompt and "several tool calls in one reply" in prompt
    assert "Example" not in prompt and "Is the hand free?" not in prompt  # zero-shot, no checklist
    assert "not on what objects usually are like" not in prompt  # no ban on common sense
    assert "within reach" not in prompt and "within the arm's reach" not in prompt  # the tools give metres
    guided = build_system_prompt("household", GUIDED)
    assert "Is the hand free?" in guided and "Example:" in guided and "not on what objects usually are like" in guided


@pytest.mark.parametrize("ablation", ["BASIC", "QGEN", "GRND", "QGEN_GRND"])
def test_the_paper_ablations_change_the_procedure_steps(ablation):
    prompt = build_system_prompt("tabletop", RaiderConfig(prompt=ablation), reach=Reach(0.85))
    assert ("GROUND - Instance Grounding" in prompt) == ("GRND" in ablation)
    assert ("ASK - Question Generation" in prompt) == ("QGEN" in ablation)
    assert "ISSUE - Decision Making" in prompt and "check_obj_relationship(relationship, obj)" in prompt


def test_each_paper_warning_in_text_mode():
    replies = [
        # warning 1: a final response while calls are pending (the calls still run, in order)
        'call_tool{"tool": "robot_holding", "args": []}\n{"final_response": "none", "explanation": "guessed"}',
        # warning 1: a tool response the model wrote itself (cut), and warning 2: a made-up tool
        'call_tool{"tool": "scan_room", "args": []}\nTool response: Call to tool scan_room with args [] returned apple',
        # warning 3: arguments by a name the tool does not take, and a call whose braces never close
        'call_tool{"tool": "get_obj_state", "args": {"object": "apple"}}\ncall_tool{"tool": "get_obj_state", "args": ["apple"',
        # warning 4: neither a call nor a final response; then a final response that is none
        "The apple is probably fine.",
        '{"final_response": "maybe", "explanation": "?"}',
        # arguments by name in another order than the tool's: bound by name
        'call_tool{"tool": "check_obj_relationship", "args": {"obj": "apple", "relationship": "on top of"}}',
        '{"final_response": "none", "explanation": "The hand is free and nothing is on the apple.", "grounding": ["apple"]}',
    ]
    model = IgnoresStop(replies)
    result = RaiderAgent(model, kitchen(), "household", CONFIG).check("pick(apple)")
    assert result.final_response == "none" and result.turns == 7, result.transcript
    kinds = [w.split(" (")[0] for w in result.warnings]
    assert kinds == ["Warning 1", "Warning 1", "Warning 2", "Warning 3", "Warning 3", "Warning 4", "Warning 4"], result.warnings
    assert "final response while tool calls are still pending" in result.warnings[0]
    assert "takes relationship, obj" not in result.warnings[3] and "unknown: object" in result.warnings[3]
    assert result.turn_warnings == [1, 2, 2, 1, 1, 0, 0]
    assert "returned The robot's hand is empty" in model.prompts[1]  # the pending call ran
    assert "returned apple" not in model.prompts[2]  # the made-up response was cut
    for i, warning in enumerate(result.warnings[:1], start=1):
        assert warning in model.prompts[i]
    assert [(c.name, c.ok) for c in result.tool_calls] == [("robot_holding", True), ("scan_room", False),
                                                            ("get_obj_state", False), ("check_obj_relationship", True)]
    assert result.tool_calls[-1].args == ["on top of", "apple"]


class PaperNativeDouble:
    """A ToolChatModel double for the paper profile: one slip of each warning, then the calls and the verdict."""

    name = "native-double"

    def __init__(self) -> None:
        self.seen: list[list[dict]] = []

    def chat_tools(self, messages, tools, *, timeout=None):
        self.seen.append(list(messages))
        done = Completion("", self.name, "", 0, 0, 0.0)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        verdict = json.dumps({"final_response": "unfeasibility", "explanation": "banana on plate", "grounding": ["plate"]})
        calls = [
            # warning 1: a final response beside a pending call; the call runs (arguments by name, in another order)
            (ToolCallRequest("a", "check_obj_relationship", '{"obj": "plate", "relationship": "on top of"}'),
             ToolCallRequest("b", "final_response", verdict)),
            (ToolCallRequest("c", "look_around", "{}"),),  # warning 2
            (ToolCallRequest("d", "get_obj_state", '{"obj": "kettle"}'), ToolCallRequest("e", "get_obj_state", "{oops")),  # 3, 3
            (),  # warning 4: no call, no final response
            (ToolCallRequest("f", "final_response", verdict),),
        ][turn]
        return ChatReply("Let me see." if not calls else "", calls, done)


def test_each_paper_warning_with_native_tool_calls():
    model = PaperNativeDouble()
    result = RaiderAgent(model, kitchen(), "household", RaiderConfig(tool_calling="native")).check("pick(plate)")
    assert result.final_response == "unfeasibility" and result.turns == 5, result.transcript
    assert [w.split(" (")[0] for w in result.warnings] == ["Warning 1", "Warning 2", "Warning 3", "Warning 3", "Warning 4"]
    assert result.turn_warnings == [1, 1, 2, 1, 0]
    assert result.tool_calls[0].args == ["on top of", "plate"] and result.tool_calls[0].ok  # bound by name
    second = model.seen[1]
    assert second[1]["content"].startswith("Action query: pick(plate)\nObjects in the scene: ")
    answered = {m["tool_call_id"]: m["content"] for m in second if m["role"] == "tool"}
    assert answered["a"] == ('Call to tool check_obj_relationship with args {"obj": "plate", "relationship": "on top of"} '
                             "returned banana is on top of plate.")
    assert answered["b"].startswith("Warning 1")
    assert model.seen[4][-1] == {"role": "user", "content": result.warnings[-1]}


def test_reading_paper_turns():
    from teachbot.raider.pfm import parse_call_tool, read_paper_turn

    assert parse_call_tool('{tool: dist_to_target, args: ["Bowl"]}') == ("dist_to_target", ["Bowl"])  # the paper's form
    assert parse_call_tool('{"tool": "get_obj_state", "args": {"obj": "apple"}}') == ("get_obj_state", {"obj": "apple"})
    turn = read_paper_turn('call_tool{"tool": "robot_holding", "args": []} and call_tool{tool: object_detection, args: []}')
    assert [c[0] for c in turn.calls] == ["robot_holding", "object_detection"] and turn.final is None and not turn.warnings
    quoting = read_paper_turn('{"final_response": "unfeasibility", "explanation": "the call call_tool{\\"tool\\": \\"x\\"} failed"}')
    assert quoting.final is not None and not quoting.calls and not quoting.warnings  # a quoted call is no call
    assert read_paper_turn("Observation: it is fine").warnings[0].startswith("Warning 1")
    assert read_paper_turn("no idea").warnings[0].startswith("Warning 4")
