"""Recovery in the console (issue 28 item 5), offline, in the household simulation, end to end.

The person asks for something; the interaction model (a stand-in that decides only from its prompt) types the
robot call; the guard in block mode has the RAIDER agent check it first (the agent's model is the eval's
stand-in, its grounded tools perceive the simulated world as it is at each check), and the issue comes back
as the statement's ``ActionIssue`` line. The stand-in reads that line and recovers:

- without a recovery planner, an ambiguity: it asks the person which one, reads the answer, and grasps the
  one they named; the simulator's hand holds it at the end;
- with a recovery planner (the recovery stand-in, told what the hand holds), the thing out of reach: the line
  carries the plan, the console runs it, the plan asks the person to bring the thing closer (the simulated
  person moves it in the world) and retries; the retry is checked again, passes, and the simulator's hand
  holds it.
"""

from __future__ import annotations

import re

import pytest

from teachbot.console.issue_guard import IssueGuard
from teachbot.console.session import SessionConfig
from teachbot.evaluation.doubles import current_transcript
from teachbot.evaluation.raider_cases import CaseWorlds, load_cases
from teachbot.evaluation.raider_person import bring_closer
from teachbot.evaluation.raider_recovery import TimedSkills, case_skills, recovery_api, robot_functions
from teachbot.evaluation.raider_recovery_standin import recovery_stand_in
from teachbot.evaluation.raider_standin import RaiderStandIn
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.interaction.core import ENDED
from teachbot.language.dialog import DialogChannel, SessionEnded
from teachbot.language.registry import RobotApi
from teachbot.language.transcript import utterance_text
from teachbot.llm.scripted import ScriptedModel
from teachbot.raider.agent import CheckResult, RaiderAgent
from teachbot.raider.recovery import PLAN_MARK, RecoveryPlanner
from teachbot.sim.household_world import HouseholdWorld


class Person(DialogChannel):
    """Makes one request, answers ask() as a person in the room would, and is done when control comes back."""

    def __init__(self, world: HouseholdWorld, request: str, choice: str = "") -> None:
        super().__init__(timeout=5.0)
        self.world, self.request, self.choice = world, request, choice
        self.started = False
        self.asked: list[str] = []

    def wait_for_trigger(self) -> dict:
        if not self.started:
            self.started = True
            return {"type": "dialog", "text": self.request}
        raise SessionEnded("the person is done")

    def ask(self, question: str) -> dict:
        self.asked.append(question)
        q = question.lower()
        if "closer" in q:
            thing = next(n for n in self.world.object_names() if n in q)
            bring_closer(self.world, thing)
            return {"type": "dialog", "text": f"There you go, the {thing} is closer now."}
        if "which" in q and self.choice:
            return {"type": "dialog", "text": f"The {self.choice}, please."}
        return {"type": "dialog", "text": "I leave that to you."}


class LiveChecker:
    """The RAIDER agent with the eval's stand-in model, its tools perceiving the world as it is at each check."""

    def __init__(self, worlds: CaseWorlds, world: HouseholdWorld) -> None:
        self.worlds, self.world = worlds, world
        self.results: list[CheckResult] = []

    def check(self, query: str) -> CheckResult:
        agent = RaiderAgent(RaiderStandIn(0.0).model(), self.worlds.tools_now(self.world), "household", self.worlds.config)
        self.results.append(agent.check(query))
        return self.results[-1]


def interaction(prompt: str) -> str:
    """The interaction stand-in: the request as a call; after an ActionIssue line, its recovery plan when it
    carries one, else for an ambiguity a question to the person, and then the call with the thing they named."""
    entries = current_transcript(prompt).entries
    last = entries[-1]
    if last.kind == "output" and last.text.startswith("ActionIssue:"):
        if PLAN_MARK in last.text:
            return last.text.split(PLAN_MARK, 1)[1]
        m = re.search(r"ambiguity: '([^']+)' could be the (.+?) or the (.+?)[:.]", last.text)
        if m:
            return f"ask('Which {m.group(1)} do you mean: the {m.group(2)} or the {m.group(3)}?')"
        return f"say({last.text.split(': ', 2)[-1]!r})"
    said = utterance_text(last.text) if last.kind == "output" else ""
    before = entries[-2].text if len(entries) > 1 else ""
    if said and before.startswith("ask("):  # the person's answer to our question: the call again, with their choice
        issue = next(e.text for e in reversed(entries) if e.text.startswith("ActionIssue:"))
        word, *candidates = re.search(r"'([^']+)' could be the (.+?) or the (.+?)[:.]", issue).groups()
        chosen = next(c for c in candidates if c in said)
        call = next(e.text for e in reversed(entries) if e.kind == "code" and e.text.startswith("grasp("))
        return call.replace(repr(word), repr(chosen))
    if said and before.startswith("wait_for_trigger"):  # the request: "grab the X"
        return f"grasp({said.removeprefix('grab the ').rstrip('.')!r})"
    return "wait_for_trigger()"


def run_episode(worlds: CaseWorlds, case_id: str, request: str, choice: str = "", planner: RecoveryPlanner | None = None):
    case = {c.id: c for c in load_cases()}[case_id]
    world = worlds.load(case)
    assert isinstance(world, HouseholdWorld)
    person = Person(world, request, choice)
    library = case_skills(world)
    checker = LiveChecker(worlds, world)
    guard = IssueGuard(checker, "block", ["grasp"], planner=planner, held=lambda: world.held_object() or "")
    functions = robot_functions(world, person, TimedSkills(library))
    functions = guard.wrap({**functions, "check_action": guard.check_action})
    core = InteractionCore(RobotApi.load("household"), functions, person, ScriptedModel(respond=interaction, name="interaction:stand-in"),
                           config=CoreConfig(session=SessionConfig(max_rounds=12), examples_k=0),
                           scene_objects=lambda: sorted(world.object_names()))
    try:
        assert core.run_episode() == ENDED
    finally:
        core.shutdown()
        library.kin.close()
    return world, person, checker, core.session.transcript.render().splitlines()


@pytest.fixture(scope="module")
def worlds():
    with CaseWorlds() as w:
        yield w


def test_the_console_asks_which_cup_after_the_action_issue_and_then_grasps_the_named_one(worlds):
    world, person, checker, lines = run_episode(worlds, "hh-ia-01", "grab the cup", choice="blue cup")
    assert ">>> grasp('cup')" in lines
    issue = lines[lines.index(">>> grasp('cup')") + 1]
    assert issue.startswith("ActionIssue: ambiguity: 'cup' could be the ")
    assert person.asked and "red cup" in person.asked[0] and "blue cup" in person.asked[0]
    assert ">>> grasp('blue cup')" in lines and lines[lines.index(">>> grasp('blue cup')") + 1] == "'success'"
    assert [r.final_response for r in checker.results] == ["ambiguity", "none"]
    assert world.held_object() == "blue cup"  # the simulator's ground truth: the one the person named


def test_the_console_runs_the_recovery_plan_of_the_issue_line_and_the_person_brings_the_apple_closer(worlds):
    planner = RecoveryPlanner(recovery_stand_in(), recovery_api("household"))
    world, person, checker, lines = run_episode(worlds, "hh-iu1-01", "grab the apple", planner=planner)
    issue = lines[lines.index(">>> grasp('apple')") + 1]
    assert issue.startswith("ActionIssue: unfeasibility: The apple is out of the arm's reach")
    plan = issue.split(PLAN_MARK, 1)[1]
    assert plan == "ask('I cannot reach the apple. Could you bring it closer to me?'); grasp('apple')"
    assert f">>> {plan}" in lines  # the console ran the plan as its next statement
    assert person.asked == ["I cannot reach the apple. Could you bring it closer to me?"]
    assert [r.final_response for r in checker.results] == ["unfeasibility", "none"]  # the retry was checked again
    assert world.held_object() == "apple"
