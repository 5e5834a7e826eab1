"""RAIDER's benchmark cases: they load and cover the taxonomy as promised, every case's ground truth holds
in its simulated world (checked with the grounded tools), and the precond baseline's scores."""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest
import yaml

from teachbot.errors import ConfigError
from teachbot.evaluation.raider_cases import (
    ABSTRACTIONS,
    ISSUE_TYPES,
    CaseWorlds,
    RaiderCase,
    distribution,
    fact_score,
    load_cases,
)
from teachbot.evaluation.raider_paper import PAPER_N, target_counts
from teachbot.raider.agent import CheckResult
from teachbot.raider.precond import ACTIONS, PrecondChecker, find_names, parse_query
from teachbot.raider.tools import GroundedTools, ToolError

# adjectives a query may use for a state: word -> (flag, value)
ADJECTIVES = {"clean": ("clean", "True"), "dirty": ("clean", "False"), "sliced": ("sliced", "True"), "whole": ("sliced", "False"),
              "empty": ("filled", "False"), "full": ("filled", "True")}


@pytest.fixture(scope="module")
def cases() -> list[RaiderCase]:
    return load_cases()


@pytest.fixture(scope="module")
def built(cases):
    """Each case's tools after its setup in the simulator, and how long building them all took. A scene
    model is a snapshot: the tools stay valid while the world moves on to the next case."""
    started = time.monotonic()
    with CaseWorlds() as worlds:
        tools = {case.id: worlds.tools_for(case) for case in cases}
    return tools, time.monotonic() - started


def action_of(case: RaiderCase) -> str:
    return parse_query(case.query, case.world, case.names())[0]


# ---------------------------------------------------------------------- (a) the data
def test_cases_load_with_the_promised_distribution(cases):
    """Cases per issue type in the RAIDER paper's proportions (its Table 1's case counts scaled), 20 or more each."""
    by_world = Counter(c.world for c in cases)
    assert by_world["household"] >= 80 and by_world["tabletop"] >= 45
    kinds, abstractions = Counter(c.issue_type for c in cases), Counter(c.abstraction for c in cases)
    assert dict(kinds) == target_counts() and min(kinds.values()) >= 20, kinds
    n, paper = len(cases), sum(PAPER_N.values())
    assert all(abs(kinds[k] / n - PAPER_N[k] / paper) < 0.005 for k in ISSUE_TYPES), kinds
    assert 0.4 <= sum(c.form == "structured" for c in cases) / n <= 0.6
    assert set(abstractions) == set(ABSTRACTIONS) and abstractions["AR"] >= 12 and abstractions["AN"] >= 20
    for world in ("household", "tabletop"):
        table = distribution([c for c in cases if c.world == world])
        print(f"\n{world}: issue type x abstraction")
        print("      " + " ".join(f"{a:>4}" for a in ABSTRACTIONS) + "  all")
        for kind in ISSUE_TYPES:
            print(f"{kind:>5} " + " ".join(f"{table[kind][a]:>4}" for a in ABSTRACTIONS) + f" {sum(table[kind].values()):>4}")
    # every query is an action of its world, and together they use every action
    actions = {c.world: set() for c in cases}
    for case in cases:
        action = action_of(case)
        assert action, f"{case.id}: no action of the {case.world} robot in {case.query!r}"
        actions[case.world].add(action)
    assert actions == {w: {a for a, s in ACTIONS.items() if s.world == w} for w in actions}


def write_cases(tmp_path, rows, name="cases.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"cases": rows}, sort_keys=False))
    return path


def good_case(**changes):
    row = {"id": "t-1", "world": "tabletop", "scene": {"objects": [{"category": "block", "color": "red", "position": [0.0, -0.5]}]},
           "setup": {"held": ""}, "query": "pick(red block)", "form": "structured", "abstraction": "AS", "expected": "none",
           "issue_type": "IN", "grounding": ["red block"], "facts": [["red block"]]}
    row.update(changes)
    return row


@pytest.mark.parametrize("changes, problem", [
    ({"world": "garden"}, "unknown world 'garden'"),
    ({"expected": "maybe"}, "unknown expected 'maybe'"),
    ({"issue_type": "IU7"}, "unknown issue_type 'IU7'"),
    ({"abstraction": "AX"}, "unknown abstraction 'AX'"),
    ({"issue_type": "IU4"}, "verdict 'none' does not fit issue type IU4"),
    ({"facts": [["red block"], ["no ", "not", "missing"]]}, r"facts \['no ', 'not', 'missing'\] say nothing specific"),
    ({"facts": [["red block"], ["pick"]]}, r"facts \['pick'\] say nothing specific"),
    ({"grounding": ["blue block"]}, r"grounding names \['blue block'\] that are not in the scene"),
    ({"expected": "unfeasibility", "issue_type": "IU3"}, "an IU3 case .* grounds to the empty list"),
    ({"setup": {"held": "green block"}}, "setup names 'green block'"),
    ({"scene": {"objects": [{"category": "plate", "color": "red", "position": [0, -0.5]}]}}, "category must be one of"),
])
def test_a_bad_case_names_the_file_the_case_and_the_problem(tmp_path, changes, problem):
    path = write_cases(tmp_path, [good_case(**changes)])
    with pytest.raises(ConfigError, match=f"{re.escape(str(path))}: case t-1: .*{problem}"):
        load_cases([path])


def test_duplicate_ids_are_refused_across_files(tmp_path):
    first, second = write_cases(tmp_path, [good_case()], "a.yaml"), write_cases(tmp_path, [good_case()], "b.yaml")
    assert len(load_cases([first])) == 1
    with pytest.raises(ConfigError, match=r"b.yaml: case t-1: duplicate id \(also in .*a.yaml\)"):
        load_cases([first, second])


# ---------------------------------------------------------------------- (b) the ground truth
def held(tools: GroundedTools) -> str:
    m = re.match(r"The robot is holding (.+)\.$", tools.robot_holding())
    return m.group(1) if m else ""


def state(tools: GroundedTools, name: str) -> dict[str, str]:
    return json.loads(tools.get_obj_state(name))


def props(tools: GroundedTools, name: str) -> dict[str, str]:
    return json.loads(tools.get_obj_properties(name))


def related(tools: GroundedTools, relationship: str, name: str) -> list[str]:
    answer = tools.check_obj_relationship(relationship, name)
    if answer.startswith("Nothing"):
        return []
    return re.sub(rf" (is|are) {relationship} {re.escape(name)}\.$", "", answer).split(", ")


def within_reach(tools: GroundedTools, name: str) -> bool:
    """From where the robot stands or, in the house, after driving to the thing's place."""
    return tools.reachable(name)


def closed_around(tools: GroundedTools, name: str) -> str:
    """The closed container (fridge, drawer) ``name`` is inside, or ''."""
    inside = state(tools, name).get("inside", "")
    return inside if inside and state(tools, inside).get("open") == "False" else ""


def in_the_way(tools: GroundedTools, case: RaiderCase, action: str) -> list[str]:
    """What keeps the action from its objects: blockers of the thing it takes or a closed container
    around it; a closed target, or on the tabletop a target block with something on it (the query's
    own objects do not count)."""
    spec, g = ACTIONS[action], case.grounding
    found: list[str] = []
    if spec.take:
        found += [b for b in related(tools, "blocking", g[0]) if b not in g] + [c for c in [closed_around(tools, g[0])] if c]
    if spec.target and g:
        target = g[-1]
        if props(tools, target).get("openable") == "true" and state(tools, target).get("open") == "False":
            found.append(target)
        if case.world == "tabletop" and props(tools, target).get("container") != "true":
            found += [b for b in related(tools, "on top of", target) if b not in g]
    return found


def hand_fits(tools: GroundedTools, action: str, grounding: tuple[str, ...]) -> bool:
    need, h = ACTIONS[action].hand, held(tools)
    if need == "free":
        return not h
    if not h:
        return False
    if need in ("knife", "sponge"):
        return props(tools, h)["category"] == need
    return h == grounding[0] if need == "first" or ACTIONS[action].args == 0 else True


def state_conflicts(tools: GroundedTools, case: RaiderCase, action: str) -> list[str]:
    """States of the first grounded thing that make the action pointless or contradict the query: the
    action's pointless state (opening the open fridge), a tabletop block already on its target, "turn
    on" something on, an adjective such as "the clean cup" for a dirty one."""
    g, spec = case.grounding, ACTIONS[action]
    if not g:
        return []
    st, out = state(tools, g[0]), []
    if spec.pointless and st.get(spec.pointless[0]) == spec.pointless[1]:
        out.append(f"{spec.pointless[0]}={spec.pointless[1]}")
    if action == "put_first_on_second" and st.get("supported_by") == g[1]:
        out.append(f"on {g[1]}")
    words = re.findall(r"[a-z]+", case.query.lower())
    if action == "toggle" and {"on", "off"} & set(words) and st.get("on") == str("on" in words):
        out.append(f"on={st['on']}")
    for word in words[1:]:  # not the verb ('clean the table')
        if word in ADJECTIVES and st.get(ADJECTIVES[word][0], ADJECTIVES[word][1]) != ADJECTIVES[word][1]:
            out.append(f"not {word}")
    return out


def check_ground_truth(case: RaiderCase, tools: GroundedTools) -> None:
    """Assert, with the tools, that the case's claim holds in its world."""
    g, kind = case.grounding, case.issue_type
    assert held(tools) == case.setup.held, "the setup's hand"
    if case.setup.at:
        pose = tools.queries.perception.pose  # type: ignore[attr-defined]
        assert pose == pytest.approx(tools.layout.location_pose(case.setup.at), abs=0.02), "the base's place"
    assert all(tools.resolve(name) == name for name in g), "grounded names are known and unique"
    action, args = parse_query(case.query, case.world, case.names())
    spec = ACTIONS[action]
    named = case.abstraction == "AS"  # the query names its objects
    if kind == "IA":
        assert len(g) >= 2
        messages = []
        for arg in args:
            try:
                tools.resolve(arg)
            except ToolError as exc:
                messages.append(str(exc))
        listed = [set(re.findall(r"any of (.*); name", m)[0].split(", ")) for m in messages if "any of" in m]
        if named or listed:  # a name of the query fits every candidate
            assert set(g) in listed, messages
        else:  # the candidates share a category or a property
            shared = [{f"category={p['category']}"} | {k for k, v in p.items() if v == "true"} for p in (props(tools, n) for n in g)]
            assert set.intersection(*shared)
        return
    if named:  # every name of the query is one object: no ambiguity
        assert all(tools.resolve(a) in g for a in args if kind != "IU3"), args
    if kind == "IU3":  # not present
        word = case.facts[0][0]
        assert not named or word in case.query, f"{word!r} is not what the query names"
        try:
            raise AssertionError(f"{word!r} is known: {tools.resolve(word)}")
        except ToolError as exc:
            assert "no object or place called" in str(exc)
        objects = json.loads(tools.object_detection())["objects"]
        assert not [o for o in objects if props(tools, o)["category"] == word or props(tools, o).get(word) == "true"]
    elif kind == "IU6":  # robot issue: holding / not holding
        assert not hand_fits(tools, action, g), tools.robot_holding()
    elif kind == "IU4":  # wrong state
        assert state_conflicts(tools, case, action)
    elif kind == "IU1":  # out of reach
        assert not all(within_reach(tools, n) for n in g)
    elif kind == "IU2":  # obstructed
        blockers = in_the_way(tools, case, action)
        assert blockers and any(b in alt for b in blockers for fact in case.facts for alt in fact), blockers
    elif kind == "IU5":  # wrong properties
        assert spec.prop and props(tools, g[0]).get(spec.prop) != "true", spec.prop
    else:  # IN: none of the above
        assert hand_fits(tools, action, g), tools.robot_holding()
        assert not spec.prop or props(tools, g[0]).get(spec.prop) == "true", spec.prop
        assert not state_conflicts(tools, case, action)
        assert not in_the_way(tools, case, action)
        assert all(within_reach(tools, n) for n in g)


def test_every_ground_truth_holds_in_the_simulated_world(cases, built):
    tools, seconds = built
    started = time.monotonic()
    failures = []
    for case in cases:
        try:
            check_ground_truth(case, tools[case.id])
        except (AssertionError, ToolError) as exc:
            failures.append(f"{case.id} ({case.issue_type}, {case.query!r}): {exc}")
    print(f"\n{len(cases)} cases: worlds and scene models built in {seconds:.1f} s, ground truths checked in "
          f"{time.monotonic() - started:.1f} s")
    assert not failures, "\n".join(failures)


def test_the_setup_really_holds_and_stacks(cases, built):
    tools, _ = built
    case = next(c for c in cases if c.id == "tt-iu2-01")
    assert related(tools[case.id], "on top of", "green block") == ["blue block"]
    case = next(c for c in cases if c.id == "hh-in-06")
    t = tools[case.id]
    assert t.robot_holding() == "The robot is holding knife." and state(t, "knife")["held"] == "True"
    here = float(re.findall(r"([\d.]+) m from the arm's base", t.dist_to_target("bread"))[0])
    assert t.reachable("bread") and here <= 0.85  # the base stands at the workbench


# ---------------------------------------------------------------------- (c) the precond baseline
def test_precond_parses_queries_by_names_only():
    names = ["red cup", "blue cup", "apple juice", "table", "counter"]
    assert find_names("Put the apple juice on the table", names) == ["apple juice", "table"]
    assert find_names("pick up the cup", names) == ["cup"]  # a name's last word
    assert parse_query("grasp('red cup', hand='right')", "household", names) == ("grasp", ["red cup"])
    assert parse_query("handover_object_to_human()", "household", names) == ("handover_object_to_human", [])
    assert parse_query("pick(red cup)", "household", names) == ("", [])  # a tabletop action
    assert parse_query("put the apple juice down on the table", "household", names) == ("place_object", ["table"])
    assert parse_query("grasp the cup on the counter", "household", names) == ("grasp", ["counter"])  # no relations
    assert parse_query("put the red block in the blue bowl", "tabletop", ["red block", "blue bowl"]) == \
        ("put_first_on_second", ["red block", "blue bowl"])
    assert parse_query("sing a song", "tabletop", ["red block"]) == ("", [])


def test_precond_answers_like_the_agent(cases, built):
    tools, _ = built
    case = next(c for c in cases if c.id == "hh-iu2-01")
    for checks in ("paper", "broad"):
        result = PrecondChecker(tools[case.id], case.world, checks).check(case.query)
        assert isinstance(result, CheckResult) and result.final_response == "unfeasibility" and result.issue_type == "IU2"
        assert result.grounding == ["milk"] and "milk" in result.explanation and "closed" in result.explanation
        assert result.tool_calls[0].name == "object_detection" and all(c.ok for c in result.tool_calls)
        assert PrecondChecker(tools[case.id], case.world, checks).check("dance(milk)").stopped == "unknown_action"


def test_precond_by_default_checks_only_the_papers_action_models(cases, built):
    """Table B.3: no reach, no blockage, no kind for pick, no uniqueness; sentences are not supported."""
    tools, _ = built
    by_id = {c.id: c for c in cases}

    def check(case_id: str, query: str = "", checks: str = "paper"):
        case = by_id[case_id]
        return PrecondChecker(tools[case_id], case.world, checks).check(query or case.query)

    assert check("hh-iu1-01").final_response == "none"  # out of reach: not a Table B.3 check
    assert check("hh-iu1-01", checks="broad").issue_type == "IU1"
    assert check("tt-iu2-01").final_response == "none"  # a block on top: not checked by the table's pick
    assert check("hh-iu5-01").final_response == "none"  # grasp(plate): pick has no is_pickable check
    assert check("hh-iu5-03").issue_type == "IU5"  # open(table): is_openable
    assert check("hh-iu4-01").issue_type == "IU4" and "already open" in check("hh-iu4-01").explanation  # is_closed
    assert check("hh-iu6-01").issue_type == "IU6"  # robot_holding none
    assert check("hh-ia-01").final_response == "none"  # grasp(cup): is_present takes a match, no uniqueness check
    assert check("hh-ia-01", checks="broad").final_response == "ambiguity"
    unsupported = check("hh-in-13")  # "pick up the banana"
    assert unsupported.final_response == "" and unsupported.stopped == "unsupported"
    assert check("hh-in-13", checks="broad").final_response == "none"
    ok = check("hh-in-01")
    assert ok.final_response == "none" and "robot_holding none" in ok.explanation  # the checks that held


def test_precond_baseline_scores(cases, built):
    tools, _ = built
    rows = []
    for case in cases:
        r = PrecondChecker(tools[case.id], case.world, "broad").check(case.query)
        det = r.final_response == case.expected
        rows.append((case, det, r.issue_type == case.issue_type, det and fact_score(case, r.explanation) == 1.0))

    def rates(group):
        n = len(group)
        return n, sum(d for _, d, _, _ in group) / n, sum(t for _, _, t, _ in group) / n, sum(e for _, _, _, e in group) / n

    print("\nprecond baseline, broad checks: n, detection, issue type, explanation (all facts)")
    for key, values in (("issue_type", ISSUE_TYPES), ("abstraction", ABSTRACTIONS), ("world", ("household", "tabletop"))):
        for value in values:
            n, det, typ, expl = rates([row for row in rows if getattr(row[0], key) == value])
            print(f"  {value:>9}: {n:>3}  det {det:6.1%}  type {typ:6.1%}  expl {expl:6.1%}")
    n, det, typ, expl = rates(rows)
    print(f"  {'all':>9}: {n:>3}  det {det:6.1%}  type {typ:6.1%}  expl {expl:6.1%}")
    by = {a: rates([row for row in rows if row[0].abstraction == a]) for a in ABSTRACTIONS}
    # it was designed for queries that name their objects: nearly all of them right, with the facts named
    assert by["AS"][1] >= 0.95 and by["AS"][2] >= 0.95 and by["AS"][3] >= 0.9
    # relations and states are beyond keyword grounding: measurably worse there
    for a in ("AR", "AC"):
        assert by[a][1] <= by["AS"][1] - 0.3 and by[a][2] <= by["AS"][2] - 0.6, (a, by[a])
