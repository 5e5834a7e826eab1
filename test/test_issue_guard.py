"""check_action() and the guard before physical robot functions, in the console's sandbox; recovery plans."""

from __future__ import annotations

import pytest
from test_raider_agent import careful_agent, kitchen  # noqa: I001 - a sibling test module

from teachbot.console.issue_guard import ActionIssue, IssueGuard, call_text
from teachbot.language.registry import RobotApi
from teachbot.llm.scripted import ScriptedModel
from teachbot.raider.agent import CheckResult, RaiderAgent
from teachbot.raider.config import RaiderConfig
from teachbot.raider.recovery import RecoveryError, RecoveryPlanner, extract_plan
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits


class Recorder:
    """A checker that judges by the world's tools through the scripted careful agent."""

    def __init__(self, held: str = "") -> None:
        self.agent = RaiderAgent(ScriptedModel(respond=careful_agent, stop=()), kitchen(held), "household",
                                 RaiderConfig(max_turns=8))
        self.queries: list[str] = []

    def check(self, query: str) -> CheckResult:
        self.queries.append(query)
        return self.agent.check(query.replace("grasp", "pick"))


def household_functions(acted: list[str]):
    def grasp(object_name: str, hand: str = "right") -> str:
        acted.append(object_name)
        return "success"

    return {"grasp": grasp}


def test_call_text_is_the_structured_query():
    assert call_text("grasp", ("red cup",), {"hand": "right"}) == "grasp('red cup', hand='right')"


def test_block_mode_stops_the_action_with_one_error_line():
    acted: list[str] = []
    checker = Recorder()
    guard = IssueGuard(checker, "block", ["grasp"])
    functions = guard.wrap(household_functions(acted))
    with pytest.raises(ActionIssue, match="^unfeasibility: banana is on top of plate.$"):
        functions["grasp"]("plate")
    assert acted == [] and checker.queries == ["grasp('plate')"]
    assert functions["grasp"]("apple") == "success" and acted == ["apple"]  # no issue: it acts


def test_warn_mode_acts_anyway_and_logs():
    acted: list[str] = []
    lines: list[str] = []
    guard = IssueGuard(Recorder(), "warn", ["grasp"], log=lines.append)
    assert guard.wrap(household_functions(acted))["grasp"]("plate") == "success"
    assert acted == ["plate"] and "ActionIssue (warn mode, acting anyway) before grasp('plate')" in lines[0]


def test_off_mode_and_a_check_without_verdict_never_block():
    acted: list[str] = []
    functions = household_functions(acted)
    assert IssueGuard(Recorder(), "off", ["grasp"]).wrap(functions)["grasp"] is functions["grasp"]

    class Undecided:
        def check(self, query):
            return CheckResult(query, "", "no verdict within the time limit of 20 s", stopped="time_limit")

    lines: list[str] = []
    guard = IssueGuard(Undecided(), "block", ["grasp"], log=lines.append)
    assert guard.wrap(functions)["grasp"]("plate") == "success"
    assert lines == ["not checked before grasp('plate'): no verdict within the time limit of 20 s"]
    assert guard.check_action("grasp('plate')")["final_response"] == "unknown"
    with pytest.raises(ValueError, match="takes the action to check as text"):
        guard.check_action("")
    with pytest.raises(ValueError, match="guard mode must be"):
        IssueGuard(None, "loud")


def test_in_the_sandbox_the_issue_is_the_statements_error_line():
    api = RobotApi.load("household")
    acted: list[str] = []
    guard = IssueGuard(Recorder(), "block", ["grasp"])
    functions = guard.wrap({**household_functions(acted), "check_action": guard.check_action})
    with SandboxExecutor(api.bind(functions), SandboxLimits()) as sandbox:
        run = sandbox.run("grasp('plate')")
        assert run.error == "ActionIssue: unfeasibility: banana is on top of plate." and run.error_type == "ActionIssue"
        run = sandbox.run("check_action('grasp(cup)')")
        assert not run.error and "ambiguity" in "".join(run.outputs), run
    assert acted == []


def test_check_action_without_a_checker_says_what_to_start():
    with pytest.raises(Exception, match="start the issue_detection node"):
        IssueGuard(None).check_action("grasp('apple')")


def test_a_recovery_plan_from_the_few_shot_prompt():
    api = RobotApi.load("household")
    result = CheckResult("grasp('milk')", "unfeasibility", "the milk is inside the fridge, which is closed.")

    def planner_double(prompt: str) -> str:
        # decides from the issue in the prompt's last block, not from the examples
        issue = prompt.rsplit("Issue:", 1)[1]
        if "closed" in issue:
            return "The fridge must be opened first.\n```python\nopen('fridge')\ngrasp('milk')\n```"
        return "```python\nsay('I cannot do that.')\n```"

    model = ScriptedModel(respond=planner_double, stop=())
    plan = RecoveryPlanner(model, api).plan("grasp('milk')", result)
    assert plan == "open('fridge')\ngrasp('milk')"
    assert "Action: grasp('milk')\nRobot holding: nothing\nIssue: unfeasibility: the milk is inside the fridge" in model.prompts[0]
    assert "handover_object_to_human" in model.prompts[0]  # the profile's API, not the tabletop's
    with pytest.raises(RecoveryError, match="nothing to recover from"):
        RecoveryPlanner(model, api).plan("grasp('apple')", CheckResult("grasp('apple')", "none", "fine"))
    with pytest.raises(RecoveryError, match="calls teleport"):
        extract_plan("```python\nteleport('milk')\n```", api)
    with pytest.raises(RecoveryError, match="not valid Python"):
        extract_plan("```python\ngrasp('milk'\n```", api)


def test_block_mode_with_a_planner_carries_the_plan_on_the_error_line():
    api = RobotApi.load("household")
    prompts: list[str] = []

    def planner_double(prompt: str) -> str:  # reads the last block: the hand, and the blocker named in the issue
        prompts.append(prompt)
        tail = prompt.rsplit("\nNow\n", 1)[1]
        held = tail.split("Robot holding: ", 1)[1].split("\n", 1)[0]
        blocker = tail.split("Issue: unfeasibility: ", 1)[1].split(" is on top of", 1)[0]
        return (f"First the {held} goes down, then the {blocker} moves.\n```python\nanswer = ask('Where should I put the {held} down?')\n"
                f"place_object('counter')\ngrasp({blocker!r})\nplace_object('table')\ngrasp('plate')\n```")

    lines: list[str] = []
    guard = IssueGuard(Recorder(), "block", ["grasp"], log=lines.append,
                       planner=RecoveryPlanner(ScriptedModel(respond=planner_double, stop=()), api), held=lambda: "knife")
    with pytest.raises(ActionIssue) as raised:
        guard.wrap(household_functions([]))["grasp"]("plate")
    assert str(raised.value) == ("unfeasibility: banana is on top of plate. Recovery plan: answer = ask('Where should I put the "
                                 "knife down?'); place_object('counter'); grasp('banana'); place_object('table'); grasp('plate')")
    assert "Robot holding: knife\nIssue: unfeasibility: banana is on top of plate." in prompts[0]

    # a plan that does not fit on one line is left out, and the log says why; the issue still blocks
    looping = RecoveryPlanner(ScriptedModel(respond=lambda _p: "```python\nfor _ in range(2):\n    say('hm')\n```", stop=()), api)
    guard = IssueGuard(Recorder(), "block", ["grasp"], log=lines.append, planner=looping)
    with pytest.raises(ActionIssue, match=r"^unfeasibility: banana is on top of plate\.$"):
        guard.wrap(household_functions([]))["grasp"]("plate")
    assert lines == ["no recovery plan for grasp('plate'): RecoveryError: the recovery plan has a statement that does not fit "
                     "on one line (line 1)"]
