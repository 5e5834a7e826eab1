"""The approval gate for motion (teachbot.console.approval, config/approval.yaml): a clear yes runs the motion
once with the same arguments; anything else, or no answer, refuses with the statement and the person's words;
`outside:` asks only for targets outside the zone or whose place cannot be told; config errors name the file and
the key; through the console, an LLM-written statement is held until the person answers. No ROS."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from timing import deadline, pytest_timeout

from teachbot.console.approval import ApprovalConfig, ApprovalGate
from teachbot.errors import ConfigError, MotionNotApproved
from teachbot.interaction import CoreConfig, InteractionCore
from teachbot.language.dialog import DialogChannel
from teachbot.language.registry import RobotApi
from teachbot.llm.scripted import ScriptedModel

pytestmark = pytest.mark.timeout(pytest_timeout(120))

SHIPPED = Path(__file__).resolve().parents[1] / "config" / "approval.yaml"
CALL = "put_first_on_second('red block', 'blue bowl')"


def gate_config(tmp_path: Path, profile: str, rules: dict, **changes) -> Path:
    """The shipped approval config with ``rules`` for ``profile`` (and top-level ``changes``), as a file."""
    raw = yaml.safe_load(SHIPPED.read_text())
    raw["profiles"][profile]["rules"] = rules
    raw.update(changes)
    path = tmp_path / "approval.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class Table:
    """The tabletop functions the gate wraps and looks up, recording the motions that really ran."""

    def __init__(self, positions: dict[str, list[float]]) -> None:
        self.positions = positions
        self.moves: list[tuple] = []

    def get_obj_pos(self, name: str) -> list[float]:
        if name not in self.positions:
            raise ValueError(f"unknown object {name!r}")
        return self.positions[name]

    def put_first_on_second(self, obj_name, target, **params):
        self.moves.append((obj_name, target, params))
        return "success"

    def functions(self) -> dict:
        return {"get_obj_pos": self.get_obj_pos, "put_first_on_second": self.put_first_on_second, "say": lambda text: None}


def answering(answers=(), timeout=2.0) -> tuple[DialogChannel, list[str], list[str]]:
    """(dialog, what the robot said, the answers left): the person says the next answer once the robot has asked
    (an answer typed before the question is not its answer)."""
    said: list[str] = []
    left = list(answers)

    def hear(text: str) -> None:
        said.append(text)
        if left:
            dialog.put_user(left.pop(0))

    dialog = DialogChannel(hear, timeout=timeout)
    return dialog, said, left


def tabletop_gate(tmp_path, rule, answers=(), timeout=2.0, positions=None):
    dialog, said, _left = answering(answers, timeout)
    table = Table(positions if positions is not None else {"red block": [0.0, -0.5], "blue bowl": [0.05, -0.45]})
    gate = ApprovalGate.load(str(gate_config(tmp_path, "tabletop", {"put_first_on_second": rule})), RobotApi.load("tabletop"), dialog)
    return gate.wrap(table.functions()), table, said


@pytest.mark.parametrize("answer", ["yes", "Yes, go ahead!", " OK. ", "y"])
def test_a_clear_yes_runs_the_motion_once_with_the_same_arguments(tmp_path, answer):
    functions, table, said = tabletop_gate(tmp_path, "always", [answer])
    assert functions["put_first_on_second"]("red block", "blue bowl", speed_factor=0.5) == "success"
    assert table.moves == [("red block", "blue bowl", {"speed_factor": 0.5})]
    assert said == ["May I run put_first_on_second('red block', 'blue bowl', speed_factor=0.5)? Say yes or no."]


@pytest.mark.parametrize("answer", ["no, use the green bowl", "yes but slower", "maybe", "yesterday"])
def test_anything_but_a_clear_yes_refuses_and_keeps_what_the_person_said(tmp_path, answer):
    functions, table, said = tabletop_gate(tmp_path, "always", [answer])
    with pytest.raises(MotionNotApproved) as refused:
        functions["put_first_on_second"]("red block", "blue bowl")
    assert table.moves == []
    message = str(refused.value)
    assert CALL in message and repr(answer) in message and "\n" not in message
    assert message == f"{CALL} was not approved, so the robot did not move; the person said: {answer!r}"
    assert said == [f"May I run {CALL}? Say yes or no."]


def test_no_answer_within_the_dialog_timeout_refuses(tmp_path):
    functions, table, said = tabletop_gate(tmp_path, "always", [], timeout=0.2)
    started = time.monotonic()
    with pytest.raises(MotionNotApproved, match=r"put_first_on_second\('red block', 'blue bowl'\) was not approved.*"
                                                r"nobody answered within 0.2 s"):
        functions["put_first_on_second"]("red block", "blue bowl")
    # the property: it gave up at its own 0.2 s (not at config/interaction.yaml's 300 s dialog timeout)
    assert 0.15 < time.monotonic() - started < 10.0
    assert table.moves == [] and len(said) == 1


def test_outside_a_box_zone_asks_only_for_targets_outside_it(tmp_path):
    positions = {"red block": [0.0, -0.5], "blue bowl": [0.05, -0.45], "green bowl": [0.28, -0.75]}
    rule = {"outside": "safe_zone"}
    # both the block and the bowl lie in the middle of the table: no question, the motion runs
    functions, table, said = tabletop_gate(tmp_path, rule, [], positions=positions)
    assert functions["put_first_on_second"]("red block", "blue bowl") == "success"
    assert said == [] and len(table.moves) == 1
    # the place lies outside: asked, with the target, where it is and the zone
    functions, table, said = tabletop_gate(tmp_path, rule, ["yes"], positions=positions)
    assert functions["put_first_on_second"]("red block", "green bowl") == "success"
    assert said == ["May I run put_first_on_second('red block', 'green bowl')? The target 'green bowl' at [0.28, -0.75] "
                    "is outside safe_zone. Say yes or no."]
    # a position given as [x, y]: inside runs, outside asks and a no refuses
    functions, table, said = tabletop_gate(tmp_path, rule, ["no"], positions=positions)
    assert functions["put_first_on_second"]("red block", [0.1, -0.4]) == "success"
    with pytest.raises(MotionNotApproved, match="the person said: 'no'"):
        functions["put_first_on_second"]("red block", [0.1, -0.78])
    assert [m[1] for m in table.moves] == [[0.1, -0.4]]
    assert "The target [0.1, -0.78] at [0.1, -0.78] is outside safe_zone" in said[0]


def test_a_target_whose_place_cannot_be_told_is_asked_about(tmp_path):
    """Fail safe: an object the position function does not know, or a target that is neither name nor position."""
    functions, table, said = tabletop_gate(tmp_path, {"outside": "safe_zone"}, ["no", "yes"])
    with pytest.raises(MotionNotApproved):
        functions["put_first_on_second"]("purple block", "blue bowl")
    assert said[0] == ("May I run put_first_on_second('purple block', 'blue bowl')? I cannot tell whether the target "
                       "'purple block' is inside safe_zone (get_obj_pos('purple block') failed: unknown object 'purple "
                       "block'). Say yes or no.")
    assert functions["put_first_on_second"]("red block", {"x": 0.0}) == "success"  # approved by the second answer
    assert "I cannot tell whether the target {'x': 0.0} is inside safe_zone" in said[1]
    assert table.moves == [("red block", {"x": 0.0}, {})]


def test_never_leaves_the_functions_as_they_are(tmp_path):
    functions, table, said = tabletop_gate(tmp_path, "never", [])
    assert functions["put_first_on_second"] == table.put_first_on_second
    functions["put_first_on_second"]("red block", [0.29, -0.79])
    assert said == [] and len(table.moves) == 1


def test_the_shipped_config_asks_about_nothing_and_is_the_default():
    assert CoreConfig().approval == "approval" == CoreConfig.from_config({}).approval
    for profile in ("tabletop", "household"):
        config = ApprovalConfig.load("approval", RobotApi.load(profile))
        assert config.rules and {rule.confirm for rule in config.rules.values()} == {"never"}
    dialog = DialogChannel()
    assert ApprovalGate.load("none", RobotApi.load("tabletop"), dialog) is None
    plain = Table({}).functions()
    assert ApprovalGate.load("approval", RobotApi.load("tabletop"), dialog).wrap(plain) == plain


class Kitchen:
    """The household functions the gate looks up: what stands where."""

    def __init__(self) -> None:
        self.at = {"table": ["apple", "bowl", "pear"], "counter": ["sponge"], "fridge": ["milk"], "workbench": []}
        self.calls: list[tuple] = []

    def list_objects(self, location: str = "") -> list[str]:
        if location not in self.at:
            raise ValueError(f"unknown location {location!r}")
        return self.at[location]

    def functions(self) -> dict:
        out = {"list_objects": self.list_objects}
        for name in ("grasp", "move_to", "place_object", "handover_object_to_human", "slice"):
            out[name] = lambda *args, _name=name, **kwargs: self.calls.append((_name, args, kwargs)) or "success"
        return out


def test_household_zones_are_places_and_the_objects_at_them(tmp_path):
    dialog, said, answers = answering()
    rules = {"grasp": {"outside": ["table", "counter"]}, "move_to": {"outside": "work_surfaces"},
             "handover_object_to_human": {"outside": "kitchen"}, "slice": "always"}
    gate = ApprovalGate.load(str(gate_config(tmp_path, "household", rules)), RobotApi.load("household"), dialog)
    kitchen = Kitchen()
    plain = kitchen.functions()
    functions = gate.wrap(plain)
    assert functions["place_object"] is plain["place_object"]  # no rule: the default, never
    functions["grasp"]("apple")  # on the table
    functions["grasp"](object_name="sponge", hand="left")  # on the counter, by keyword
    functions["move_to"]("counter", speed_factor=0.2)  # a place of the zone
    assert said == []
    answers.append("no, the milk stays in the fridge")
    with pytest.raises(MotionNotApproved, match=r"grasp\('milk'\) was not approved.*'no, the milk stays in the fridge'"):
        functions["grasp"]("milk")
    assert said[-1] == "May I run grasp('milk')? The target 'milk' is outside table or counter. Say yes or no."
    answers.append("yes")
    functions["move_to"]("sink")
    assert said[-1] == "May I run move_to('sink')? The target 'sink' is outside work_surfaces. Say yes or no."
    answers.append("go ahead")
    functions["handover_object_to_human"]()  # names no place: always asked
    assert "It names no target, so I cannot tell whether it stays inside kitchen" in said[-1]
    answers.append("ok")
    functions["slice"]("pear")
    assert said[-1] == "May I run slice('pear')? Say yes or no."
    assert [c[0] for c in kitchen.calls] == ["grasp", "grasp", "move_to", "move_to", "handover_object_to_human", "slice"]
    assert kitchen.calls[1] == ("grasp", (), {"object_name": "sponge", "hand": "left"})


def test_a_place_lookup_that_fails_is_asked_about(tmp_path):
    dialog, said, _left = answering(["stop"])
    gate = ApprovalGate.load(str(gate_config(tmp_path, "household", {"grasp": {"outside": ["table", "nowhere"]}})),
                             RobotApi.load("household"), dialog)
    kitchen = Kitchen()
    functions = gate.wrap(kitchen.functions())
    with pytest.raises(MotionNotApproved, match="the person said: 'stop'"):
        functions["grasp"]("milk")
    assert "I cannot tell whether the target 'milk' is inside table or nowhere (list_objects('nowhere') failed" in said[0]
    assert kitchen.calls == []


@pytest.mark.parametrize(("profile", "rules", "changes", "key", "problem"), [
    ("tabletop", {"put_first_on_second": {"outside": "kitchen"}}, {}, "profiles.tabletop.rules.put_first_on_second.outside",
     "unknown zone 'kitchen'; known: ['safe_zone', 'table']"),
    ("tabletop", {"put_first_on_second": "sometimes"}, {}, "profiles.tabletop.rules.put_first_on_second",
     "must be never, always or {outside: <zone>}, got 'sometimes'"),
    ("tabletop", {"say": "always"}, {}, "profiles.tabletop.rules.say", "not a motion"),
    ("household", {}, {"approve": [True, "ok"]}, "approve", "quoted words (YAML reads a bare yes as true)"),
    ("tabletop", {}, {"profiles": {"household": {}}}, "profiles.tabletop", "missing"),
])
def test_config_errors_name_the_file_and_the_key(tmp_path, profile, rules, changes, key, problem):
    path = gate_config(tmp_path, profile, rules, **changes)
    with pytest.raises(ConfigError) as error:
        ApprovalGate.load(str(path), RobotApi.load(profile), DialogChannel())
    assert str(error.value).startswith(f"{path}: {key}: ") and problem in str(error.value)


def test_config_errors_in_motions_and_zones(tmp_path):
    raw = yaml.safe_load(SHIPPED.read_text())
    raw["profiles"]["tabletop"]["motions"]["put_first_on_second"] = ["obj_name", "place"]
    raw["profiles"]["household"]["zones"]["work_surfaces"] = {"x": [1.0, 0.0], "y": [0.0, 1.0]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"bad.yaml: profiles.tabletop.motions.put_first_on_second: \['place'\] are not "
                                          r"parameters of put_first_on_second\(obj_name"):
        ApprovalConfig.load(str(path), RobotApi.load("tabletop"))
    with pytest.raises(ConfigError, match=r"bad.yaml: profiles.household.zones.work_surfaces.x: must be \[min, max\]"):
        ApprovalConfig.load(str(path), RobotApi.load("household"))
    with pytest.raises(ConfigError, match="config file not found"):
        ApprovalConfig.load(str(tmp_path / "missing.yaml"), RobotApi.load("tabletop"))
    raw = yaml.safe_load(SHIPPED.read_text())
    del raw["profiles"]["household"]["motions"]["point_at"]  # a motion the gate would never ask about
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"profiles.household.motions: must list exactly the functions marked "
                                          r"`motion: true` in config/robot_api/household.yaml"):
        ApprovalConfig.load(str(path), RobotApi.load("household"))


# ----------------------------------------------------------------------------- through the console


class Robot:
    """The tabletop API's robot side without a robot (as in test_interaction_core)."""

    def __init__(self, dialog: DialogChannel) -> None:
        self.dialog = dialog
        self.moves: list[tuple] = []

    def functions(self) -> dict:
        return {
            "wait_for_trigger": self.dialog.wait_for_trigger, "ask": self.dialog.ask, "say": self.dialog.say,
            "get_obj_names": lambda: ["blue bowl", "red block"], "get_obj_pos": lambda name: [0.0, -0.5],
            "denormalize_xy": lambda xy: xy,
            "put_first_on_second": lambda a, b: self.moves.append((a, b)) or "success",
        }


def wait_until(predicate, timeout=20.0, what="condition"):
    until = deadline(timeout)
    while not predicate():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("answer", ["yes", "no, use the green bowl"])
def test_a_statement_the_llm_wrote_is_held_until_the_person_answers(tmp_path, answer):
    """The console runs put_first_on_second in the sandbox worker; the gate in this process asks, and the robot
    does not move before the answer; a yes runs it, anything else is the statement's error line."""
    said: list[str] = []
    dialog = DialogChannel(said.append, timeout=20.0)
    robot = Robot(dialog)
    model = ScriptedModel([CALL, "wait_for_trigger()"])
    config = CoreConfig(approval=str(gate_config(tmp_path, "tabletop", {"put_first_on_second": "always"})))
    core = InteractionCore(RobotApi.load("tabletop"), robot.functions(), dialog, model, config=config,
                           scene_objects=lambda: ["blue bowl", "red block"])
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    try:
        dialog.put_user("put the red block in the blue bowl")
        wait_until(lambda: said, what="the question")
        assert said == [f"May I run {CALL}? Say yes or no."]
        time.sleep(0.5)  # held: the statement waits for the person, the robot does not move
        assert robot.moves == [] and model.served == 1
        assert core.session.transcript.render().splitlines()[-1] == f">>> {CALL}"
        dialog.put_user(answer)
        wait_until(lambda: model.served >= 2, what="the statement after the answer")
        lines = core.session.transcript.render().splitlines()
    finally:
        core.close()
        thread.join(timeout=10)
        core.shutdown()
    assert lines[2] == f">>> {CALL}"
    if answer == "yes":
        assert robot.moves == [("red block", "blue bowl")] and lines[3] == "'success'"
    else:
        assert robot.moves == []
        assert lines[3] == f"MotionNotApproved: {CALL} was not approved, so the robot did not move; the person said: {answer!r}"


def test_a_call_with_long_arguments_still_asks_a_question_the_dialog_will_say(tmp_path):
    """The statement in the question is cut, so a long argument cannot push the question past max_say_chars."""
    functions, table, said = tabletop_gate(tmp_path, "always", ["yes"])
    long_name = "red block " * 200
    table.positions[long_name] = [0.0, -0.5]
    assert functions["put_first_on_second"](long_name, "blue bowl") == "success"
    assert len(said) == 1 and len(said[0]) < 400 and said[0].endswith("...)? Say yes or no.")


def test_waiting_for_the_answer_is_not_robot_time(tmp_path):
    """The question is asked inside the motion call the sandbox times: the person's half second of thought
    must not use the robot-time budget."""
    from teachbot.sandbox.robot_time import RobotClock

    dialog = DialogChannel(timeout=5.0)
    gate = ApprovalGate.load(str(gate_config(tmp_path, "tabletop", {"put_first_on_second": "always"})),
                             RobotApi.load("tabletop"), dialog)
    functions = gate.wrap(Table({}).functions())
    clock = RobotClock(per_snippet=10.0, per_episode=10.0)
    began = time.monotonic()
    threading.Timer(2.0, dialog.put_user, ("yes",)).start()  # two seconds of thought: counted, they would show
    with clock.motion("put_first_on_second"):
        assert functions["put_first_on_second"]("red block", "blue bowl") == "success"
    assert time.monotonic() - began >= 1.95 and clock.snippet < 1.0, clock.snippet
