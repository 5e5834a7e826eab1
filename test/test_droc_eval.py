"""DROC's evaluation (issue 13, item 5): small real runs in the simulation with the doubles, asserting on
the figures the mechanics imply, plus resumability and the command line's argument errors.

The doubles prove the mechanics (the handler's re-run, extraction, retrieval by text and looks, the
person from the ground truth), not a model: teachbot.evaluation.droc_doubles. The skill-level run uses
the thin coaster with its similar variant renamed ("square drink mat": looks like the brown coaster, shares
no word with it) so that retrieval by name and by looks come apart, and the part-open drawer, whose
dissimilar variant (the fridge) must not get the drawer's pull.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from timing import pytest_timeout

from teachbot.cli import main
from teachbot.errors import ConfigError
from teachbot.evaluation.droc import METHODS, DrocConfig, double_models, format_table, read_results, run_droc, summarise, write_summary
from teachbot.evaluation.droc_doubles import CorrectionDouble, read_parameter, wrong_object
from teachbot.evaluation.droc_extraction_double import ExtractionDouble
from teachbot.evaluation.droc_request import first as first_listed
from teachbot.evaluation.droc_tasks import load_tasks
from teachbot.knowledge import KnowledgeStore
from teachbot.paths import config_path

pytestmark = pytest.mark.timeout(pytest_timeout(600))

MAT = "square drink mat"
ALL = ("droc", "droc-full-history", "droc-no-prior", "droc-no-visual", "droc-retrieve-all", "ours-r", "droc-rule-skills", "cap")


def skill_tasks(tmp: Path):
    """thin_coaster (its similar object renamed) and drawer_part_open, from the shipped household tasks."""
    raw = yaml.safe_load(config_path("benchmarks", "droc", "household.yaml").read_text())
    tasks = [t for t in raw["tasks"] if t["id"] in ("thin_coaster", "drawer_part_open")]
    for variant in tasks[0]["variants"]:
        if variant["role"] == "similar":
            variant["object"] = MAT
            variant["scene"]["objects"][0]["name"] = MAT
    path = tmp / "tasks.yaml"
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return load_tasks([path])


@pytest.fixture(scope="module")
def embedder():
    from teachbot.memory import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.fixture(scope="module")
def skill_run(tmp_path_factory, embedder):
    tmp = tmp_path_factory.mktemp("droc")
    out = tmp / "out"
    run_droc(DrocConfig(methods=ALL), out, double_models(), tasks=skill_tasks(tmp), text_embedder=embedder)
    rows = read_results(out)
    return out, {(r["method"], r["task"], r["variant"]): r for r in rows}


def test_droc_learns_on_the_same_and_the_similar_object(skill_run) -> None:
    _, rows = skill_run
    teach = rows["droc", "thin_coaster", "coaster"]
    assert teach["success"] and teach["corrections"] >= 1 and teach["applied"] == []
    assert teach["params"] == {"grasp_height_offset": pytest.approx(-0.003)}  # two "a bit lower" in the coaster's scale
    for variant, obj in (("coaster_again", "brown coaster"), ("square_coaster", MAT)):
        row = rows["droc", "thin_coaster", variant]
        assert row["success"] and row["corrections"] == 0 < teach["corrections"], row["said"]
        # nothing applied silently: the block shows the learned value and the model writes it
        assert row["applied"] == [] and "grasp_height_offset=-0.003" in row["shown"]
        assert f">>> grasp('{obj}', grasp_height_offset=-0.003)" in row["transcript"] and row["params"] == {"grasp_height_offset": -0.003}
    drawer = [rows["droc", "drawer_part_open", v]["corrections"] for v in ("cupboard", "cupboard_with_apple")]
    assert drawer[0] >= 1 and drawer[1] == 0


def test_without_prior_history_nothing_improves(skill_run) -> None:
    _, rows = skill_run
    for task, first, again in (("thin_coaster", "coaster", "coaster_again"), ("drawer_part_open", "cupboard", "cupboard_with_apple")):
        one, two = rows["droc-no-prior", task, first], rows["droc-no-prior", task, again]
        assert one["corrections"] == two["corrections"] >= 1 and one["success"] and two["success"]
        assert two["applied"] == [] and two["shown"] == ""
    assert rows["droc-no-prior", "thin_coaster", "square_coaster"]["corrections"] >= 1
    assert all(r["knowledge_entries"] <= 1 for (m, _, _), r in rows.items() if m == "droc-no-prior")  # emptied each episode


def test_without_visual_retrieval_the_differently_named_lookalike_gets_nothing(skill_run) -> None:
    _, rows = skill_run
    assert rows["droc-no-visual", "thin_coaster", "coaster_again"]["corrections"] == 0  # by its name
    mat = rows["droc-no-visual", "thin_coaster", "square_coaster"]
    assert mat["applied"] == [] and mat["corrections"] >= 1 and mat["success"]
    assert rows["droc", "thin_coaster", "square_coaster"]["corrections"] == 0  # droc knew it by its looks


def test_the_dissimilar_object_keeps_its_default_unless_retrieve_all_applies_everything(skill_run) -> None:
    _, rows = skill_run
    fridge = rows["droc", "drawer_part_open", "fridge"]
    assert fridge["applied"] == [] and fridge["corrections"] == 0 and fridge["success"]
    # DROC's order: the selection model picks the cupboard's task ("open"), but its entry is about the cupboard, which is
    # neither the fridge's name nor (no image of a place here) a visual match: not shown, not applied
    assert "pull_distance" not in fridge["shown"] and any('"Yes"' in a["raw"] for a in fridge["selection"]), fridge["selection"]
    assert rows["droc", "thin_coaster", "cup"]["applied"] == []
    every = rows["droc-retrieve-all", "drawer_part_open", "fridge"]
    assert ">>> open('fridge', pull_distance=0.22)" in every["transcript"]  # every entry shown: the model writes the drawer's pull
    assert every["corrections"] >= 1 and not every["success"]  # a door refuses a pull_distance: it never opens
    assert every["said"][0] == "Just open it the normal way."
    cup = rows["droc-retrieve-all", "thin_coaster", "cup"]
    assert ">>> grasp('blue cup', grasp_height_offset=-0.003)" in cup["transcript"] and cup["corrections"] == 0  # suits the cup too


def test_the_handlers_two_steps_and_their_raw_answers_are_in_the_results(skill_run) -> None:
    _, rows = skill_run
    teach = rows["droc", "thin_coaster", "coaster"]
    assert teach["history_selection"] is True and len(teach["handler"]) == teach["corrections"] >= 1
    for answer, said in zip(teach["handler"], teach["said"]):
        assert answer["utterance"] == said and answer["dependence_raw"].endswith(("(c)", "(c).")), answer  # "a bit lower": on its own
        assert answer["history"] == "none" and answer["level"] == "skill" and '"parameter": "grasp_height_offset"' in answer["raw"]
    whole = rows["droc-full-history", "thin_coaster", "coaster"]
    assert whole["history_selection"] is False and all(a["dependence_raw"] == "" for a in whole["handler"])
    assert all('"history": "none"' in a["raw"] for a in whole["handler"])  # one call: the solver says the dependence
    # the doubles read long and short histories alike: Ours-E's figures equal DROC's here (a model's may not)
    for key, row in rows.items():
        if key[0] == "droc":
            other = rows["droc-full-history", key[1], key[2]]
            assert (other["corrections"], other["success"], other["params"]) == (row["corrections"], row["success"], row["params"])
    assert rows["cap", "thin_coaster", "coaster"]["handler"] == [] and rows["cap", "thin_coaster", "coaster"]["history_selection"] is None


def test_skill_knowledge_comes_from_the_extractors_skill_prompt_and_the_rules_are_the_ablation(skill_run) -> None:
    out, rows = skill_run
    teach, ablation = rows["droc", "thin_coaster", "coaster"], rows["droc-rule-skills", "thin_coaster", "coaster"]
    skill = [a["raw"] for a in teach["extractor"] if '"object_state"' in a["raw"]]
    assert skill and all(raw.startswith("Reasoning:") for raw in skill)  # the raw skill answers, reasoning first
    assert any('"grasp_height_offset": -' in raw for raw in skill) and teach["extractor_unread"] == []
    assert not any('"object_state"' in a["raw"] for a in ablation["extractor"])  # the ablation sends no skill prompt
    store = KnowledgeStore(out / "knowledge" / "droc")
    learned = [e for e in store.list() if e.kind == "skill_parameter"]
    assert learned and {e.provenance.model for e in learned} == {"extraction:droc-double"}
    ruled = [e for e in KnowledgeStore(out / "knowledge" / "droc-rule-skills").list() if e.kind == "skill_parameter"]
    assert ruled and {e.provenance.model for e in ruled} == {"rule"}
    # the double reads the skill prompt as the rules read the calls: at noise 0 the two agree
    for key, row in rows.items():
        if key[0] == "droc":
            other = rows["droc-rule-skills", key[1], key[2]]
            assert (other["corrections"], other["success"], other["params"]) == (row["corrections"], row["success"], row["params"])
    report = write_summary(out)[0].read_text()
    assert "rules ablation of skill knowledge (droc-rule-skills)" in report and "Extractor answers that could not be used: none" in report


def test_cap_keeps_nothing_and_needs_the_same_corrections_every_time(skill_run) -> None:
    out, rows = skill_run
    assert not (out / "knowledge" / "cap").exists()
    for task, first, again in (("thin_coaster", "coaster", "coaster_again"), ("drawer_part_open", "cupboard", "cupboard_with_apple")):
        one, two = rows["cap", task, first], rows["cap", task, again]
        assert one["corrections"] == two["corrections"] >= 1 and one["said"] == two["said"] and two["applied"] == []
    assert "# correction:" not in rows["cap", "thin_coaster", "coaster"]["transcript"]  # no handler: the model itself
    assert "grasp('brown coaster', grasp_height_offset=-0.02)" in rows["cap", "thin_coaster", "coaster"]["transcript"]


def test_the_summary_and_report(skill_run) -> None:
    out, rows = skill_run
    summary = summarise(rows.values())
    assert summary["episodes"] == len(rows) == len(ALL) * 7
    droc = summary["corrections"]["droc"]["skill"]
    assert droc["1"] > droc["2"] == 0 and summary["corrections"]["droc"]["plan"] == {"1": None, "2": None, "3": None}
    assert summary["corrections"]["droc-no-prior"]["skill"]["2"] >= 1
    assert summary["per_task"]["cap"]["drawer_part_open"] == {1: 2.0, 2: 2.0, 3: 0.0}
    report, table = write_summary(out)
    assert table == format_table(summary) and table.splitlines()[0].startswith("| method | all 1 |")
    text = report.read_text()
    assert table in text and "half as many corrections as Code as Policies" in text and "not any model's quality" in text
    assert json.loads((out / "summary.json").read_text())["corrections"]["droc"]["skill"]["2"] == 0


def test_plan_level_knowledge_carries_the_right_object(tmp_path, embedder) -> None:
    tasks = [t for t in load_tasks() if t.id == "my_cup"]
    # a reader that takes the first cup listed: the red one (the scenes list it first), so each episode starts wrong
    run_droc(DrocConfig(methods=("droc", "cap")), tmp_path, double_models(guess=first_listed), tasks=tasks, text_embedder=embedder)
    rows = {(r["method"], r["iteration"]): r for r in read_results(tmp_path)}
    assert rows["droc", 1]["said"] == ["No, not the red cup. My cup is the blue cup."] and rows["droc", 1]["success"]
    assert "# correction: plan-level, about the initial request: Use the blue cup, not the red cup." in rows["droc", 1]["transcript"]
    [answer] = rows["droc", 1]["handler"]
    assert answer["dependence_raw"] in ("(b)", "The correction depends on (b).")
    assert answer["constraint"] == "Use the blue cup, not the red cup."
    for iteration in (2, 3):
        assert rows["droc", iteration]["corrections"] == 0 and "they mean the blue cup" in rows["droc", iteration]["shown"]
        assert rows["cap", iteration]["corrections"] == 1  # told again every time
    assert ">>> grasp('blue cup')" in rows["droc", 3]["transcript"] and "grasp('green cup')" not in rows["droc", 3]["transcript"]


def test_a_run_resumes_and_refuses_other_settings(tmp_path, embedder) -> None:
    tasks = [t for t in load_tasks() if t.id == "drawer_part_open"]
    seen: list[dict] = []
    run_droc(DrocConfig(methods=("droc",), iterations=1), tmp_path, double_models(), tasks=tasks, text_embedder=embedder,
             progress=seen.append)
    assert [(r["iteration"], r["corrections"]) for r in seen] == [(1, 2)]
    run_droc(DrocConfig(methods=("droc",), iterations=2), tmp_path, double_models(), tasks=tasks, text_embedder=embedder,
             progress=seen.append)
    assert [(r["iteration"], r["corrections"]) for r in seen] == [(1, 2), (2, 0)]  # the store on disk carried on
    run_droc(DrocConfig(methods=("droc",), iterations=2), tmp_path, double_models(), tasks=tasks, text_embedder=embedder,
             progress=seen.append)
    assert len(seen) == 2 and len(read_results(tmp_path)) == 2  # nothing ran twice
    with pytest.raises(ConfigError, match="max_corrections"):
        run_droc(DrocConfig(methods=("droc",), max_corrections=2), tmp_path, double_models(), tasks=tasks, text_embedder=embedder)


def test_the_command_line_runs_resumes_and_names_bad_arguments(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["eval", "droc", "--methods", "cap", "--tasks", "drawer_part_open", "--iterations", "1", "--noise", "0", "--out", str(out),
            "--no-progress", "--no-looks"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "corrections per iteration (doubles)" in printed and "| cap | 2.00 |" in printed
    assert main(argv) == 0 and len(read_results(out)) == 1
    capsys.readouterr()
    for extra, message in ((["--methods", "droc,nope"], "unknown method 'nope'"), (["--tasks", "no_such_task"], "unknown task"),
                           (["--iterations", "4"], "--iterations must be 1, 2 or 3"),
                           (["--max-corrections", "0"], "--max-corrections must be at least 1"),
                           (["--methods", "cap,cap"], "given twice"), (["--trials", "0"], "--trials must be at least 1"),
                           (["--noise", "1.5"], "--noise must be in [0, 1]"),
                           (["--models", "config", "--llm-base-url", "https://api.example.com/v1", "--llm-model", "m"],
                            "--allow-paid")):
        fresh = tmp_path / f"bad{len(extra)}{extra[0]}"
        assert main(["eval", "droc", "--out", str(fresh), "--no-progress", "--no-looks", *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
        assert not fresh.exists()  # refused before anything was written
    noisy = tmp_path / "noisy"  # two seeds of the doubles' reading noise: a line per trial, mean ± standard error
    assert main(["eval", "droc", "--methods", "cap", "--tasks", "drawer_part_open", "--iterations", "1", "--trials", "2",
                 "--noise", "0.5", "--out", str(noisy), "--no-progress"]) == 0  # with the upright/flipped cups, per trial
    rows = read_results(noisy)
    assert [(r["trial"], r["seed"], r["noise"]) for r in rows] == [(0, 0, 0.5), (1, 1, 0.5)]
    assert " ± " in capsys.readouterr().out and json.loads((noisy / "droc_settings.json").read_text())["noise"] == 0.5
    looks = [json.loads(line) for line in (noisy / "looks.jsonl").read_text().splitlines()]
    assert [r["trial"] for r in looks] == [0, 1] and all(r["queries"] == 8 for r in looks)
    for r in looks:  # colour the distractor: each query cup has the other pose's colour
        assert {q["colour"] for q in r["per_query"] if q["pose"] == "upright"} == {r["taught"]["flipped"]}
        assert r["hits"] == sum(q["retrieved"] == q["pose"] for q in r["per_query"])
        assert r["no_visual_hits"] == 4  # by words the two entries tie: right for one pose only
    summary = json.loads((noisy / "summary.json").read_text())["upright_flipped"]
    assert summary["trials"] == 2 and summary["accuracy"] >= 0.75, summary  # the looks tell the pose apart
    assert "## Upright or flipped cup" in (noisy / "report.md").read_text()
    assert main(["eval", "droc", "--methods", "cap", "--tasks", "drawer_part_open", "--iterations", "1", "--trials", "2",
                 "--noise", "0.2", "--out", str(noisy), "--no-progress"]) == 2  # another noise: not the same run
    assert "noise" in capsys.readouterr().err
    renamed = tmp_path / "renamed"  # the old name of droc-retrieve-all: accepted with a deprecation warning
    assert main(["eval", "droc", "--methods", "droc-all-history", "--tasks", "drawer_part_open", "--iterations", "1",
                 "--out", str(renamed), "--no-progress", "--no-looks"]) == 0
    assert "method 'droc-all-history' is deprecated: it is 'droc-retrieve-all' now" in capsys.readouterr().err
    [row] = read_results(renamed)
    assert row["method"] == "droc-retrieve-all" and (renamed / "knowledge" / "droc-retrieve-all").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["eval", "droc", "--methods", "cap", "--tasks", "drawer_part_open", "--out", str(other), "--no-progress",
                 "--no-looks"]) == 2
    assert "holds no DROC run" in capsys.readouterr().err


def test_saved_results_and_stores_under_the_old_name_are_read_as_the_new_one(tmp_path, embedder, caplog) -> None:
    tasks = [t for t in load_tasks() if t.id == "drawer_part_open"]
    run_droc(DrocConfig(methods=("droc-retrieve-all",), iterations=1), tmp_path, double_models(), tasks=tasks, text_embedder=embedder)
    results = tmp_path / "results.jsonl"  # as an older version wrote them
    results.write_text(results.read_text().replace('"droc-retrieve-all"', '"droc-all-history"'))
    (tmp_path / "knowledge" / "droc-retrieve-all").rename(tmp_path / "knowledge" / "droc-all-history")
    with caplog.at_level("WARNING"):
        rows = read_results(tmp_path)
    assert [r["method"] for r in rows] == ["droc-retrieve-all"] and "is deprecated" in caplog.text
    assert summarise(rows)["per_task"]["droc-retrieve-all"]["drawer_part_open"] == {1: 2.0}
    seen: list[dict] = []
    run_droc(DrocConfig(methods=("droc-retrieve-all",), iterations=2), tmp_path, double_models(), tasks=tasks, text_embedder=embedder,
             progress=seen.append)
    assert [(r["iteration"], r["corrections"]) for r in seen] == [(2, 0)]  # iteration 1 was done; the old store carried on
    assert (tmp_path / "knowledge" / "droc-retrieve-all").is_dir() and not (tmp_path / "knowledge" / "droc-all-history").exists()


def test_the_doubles_read_their_prompts() -> None:
    assert read_parameter("You missed it, it is very flat. Grasp it a bit lower.", "grasp") == ("grasp_height_offset", "-")
    assert read_parameter("Careful, the jars beside it! Open the gripper a bit less.", "grasp") == ("gripper_width", "-")
    assert read_parameter("A little further left, please.", "place_object") == ("place_offset_across", "left")
    assert read_parameter("Don't pull the drawer out so far. A bit less.", "open") == ("pull_distance", "-")
    assert read_parameter("Just open it the normal way.", "open") == ("", "default")
    assert read_parameter("Thanks!", "open") is None
    assert wrong_object("No, not the red cup. My cup is the blue cup.") == ("red cup", "blue cup")
    assert wrong_object("Wrong block, take the green block.") == ("", "green block")
    skills = ("def open(thing: str, *, pull_distance: float = 0.32) -> str:\n    # parameters:\n"
              "    #   pull_distance: default 0.32 m, range [0.1, 0.32] m; how far\n\n")
    prompt = skills + ("The latest skill calls, oldest first:\n1. open('cupboard')   <- the last action\n\n"
                       "The person now says: Pull it out a bit less.\n")
    answer = CorrectionDouble().answer(prompt)  # the whole-history prompt (Ours-E): the double says the dependence too
    assert answer.startswith("The person wants open on the cupboard") and "```json" in answer
    body = json.loads(answer.split("```json\n", 1)[1].split("```", 1)[0])
    assert (body["level"], body["parameter"], body["direction"], body["object"], body["history"]) == \
        ("skill", "pull_distance", "-", "cupboard", "last")
    # the two steps: the dependence from the words alone, then the solver from the skill being done and the history shown
    for words, letter in (("Grasp it a bit lower.", "c"), ("A bit more, please.", "a"), ("That is not mine, I meant the blue cup.", "b"),
                          ("Just open it the normal way.", "c"), ("You did not get it. Please try again.", "a")):
        dependence = CorrectionDouble().answer(f'A human is issuing corrections to a robot.\n\nCorrection: "{words}"\nAnswer.')
        assert dependence == f"({letter})", words
    doing = "The skill the robot is doing now (its latest call, without its parameter values): {}\n\n"
    more = "# correction: skill-level, about the last action: grasp('coaster') again with grasp_height_offset=-0.0015 (was 0)\n"
    for call, history, words, expected in (
            ("grasp('coaster')", more, "A bit more, please.", ("skill", "grasp_height_offset", "-")),  # the last change again
            ("grasp('coaster')", more, "A bit less, please.", ("skill", "grasp_height_offset", "+")),
            ("grasp('coaster')", "depends on: nothing", "A bit more, please.", ("plan", "", "")),  # no history: nothing to repeat
            ("open('cupboard')", "depends on: nothing", "Pull it out a bit less.", ("skill", "pull_distance", "-"))):
        double = CorrectionDouble()
        double.answers = 1  # the bare style
        body = json.loads(double.answer(skills + doing.format(call) + history + f"\nThe person now says: {words}\n").split("\n")[1])
        assert (body["level"], body["parameter"], body["direction"]) == expected and "history" not in body, (history, words)
    extracted = ExtractionDouble().answer("The person's original request: bring me my cup\nThe person's corrections:\n"
                                          "- No, not the red cup. My cup is the blue cup.\n\nAlready learned")
    item = json.loads(extracted.split("```json\n", 1)[1].split("```", 1)[0])[0]
    assert item["kind"] == "constraint" and item["object"] == "blue cup" and "not the red cup" in item["text"]
    assert set(METHODS) == set(ALL)
    from teachbot.commands.eval_droc import METHODS as CLI_METHODS

    assert tuple(METHODS) == CLI_METHODS


def test_configured_models_over_an_endpoint(tmp_path, capsys) -> None:
    """--models config: the console, the handler and the extractor call an OpenAI-compatible server (here a
    local fake answering with the doubles' logic, so the mechanics over HTTP are the same)."""
    from fake_openai_server import FakeOpenAIServer

    from teachbot.evaluation.droc_doubles import InteractionDouble

    console, handler, extractor = InteractionDouble(), CorrectionDouble(), ExtractionDouble()

    def respond(body: dict) -> str:
        prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", [])) or str(body.get("prompt", ""))
        if "The person now says:" in prompt or "A human is issuing corrections" in prompt:
            return handler.answer(prompt)
        if "Distil what the robot should remember" in prompt:
            return extractor.answer(prompt)
        return console.answer(prompt)

    out = tmp_path / "config"
    with FakeOpenAIServer() as server:
        server.respond = respond
        code = main(["eval", "droc", "--models", "config", "--llm-base-url", server.base_url, "--llm-model", "fake-model",
                     "--methods", "droc", "--tasks", "drawer_part_open", "--iterations", "1", "--out", str(out), "--no-progress"])
        requests = list(server.requests)
    assert code == 0, capsys.readouterr().err
    [row] = read_results(out)
    assert row["success"] and row["corrections"] == 2 and row["params"] == {"pull_distance": 0.22} and row["tokens"] > 0
    assert sum("The person now says:" in json.dumps(r) for r in requests) == 2  # the solver, once per correction
    assert sum("A human is issuing corrections" in json.dumps(r) for r in requests) == 2  # and the dependence step before it
    assert [a["dependence_raw"] for a in row["handler"]] == ["(c)", "(a)"]  # "so far": on its own; "too far out...": the last
    assert "corrections per iteration (config: openai fake-model)" in capsys.readouterr().out
    assert "not any model's quality" not in (out / "report.md").read_text()


def test_the_doubles_misread_at_their_noise_level_from_the_words_and_the_seed() -> None:
    from teachbot.evaluation.droc_doubles import Understanding

    skills = "def grasp(object_name: str, *, grasp_height_offset: float = 0.0) -> str:\n\n"
    prompt = skills + ("The skill the robot is doing now (its latest call, without its parameter values): grasp('coaster')\n\n"
                       "depends on: nothing\nThe person now says: Grasp it a bit lower.\n")

    def direction(noise: float, seed: int = 0) -> str:
        double = CorrectionDouble(Understanding(noise, seed))
        double.answers = 1
        double.begin_draw("thin_coaster/1/coaster")
        return json.loads(double.answer(prompt).split("\n")[1])["direction"]

    assert direction(0.0) == "-" and direction(1.0) == "+"  # always right; always the other way round
    draws = [direction(0.5, seed) for seed in range(40)]
    assert draws == [direction(0.5, seed) for seed in range(40)]  # a seed reads the same words the same way
    assert 8 <= draws.count("+") <= 32  # about half of the seeds misread
    always = CorrectionDouble(Understanding(1.0))
    assert always.answer('A human is issuing corrections to a robot.\n\nCorrection: "Grasp it a bit lower."\nAnswer.') != "(c)"
    request = ("The person's original request: bring me my cup\nThe person's corrections:\n"
               "- No, not the red cup. My cup is the blue cup.\n\nAlready learned")
    assert ExtractionDouble(Understanding(1.0)).answer(request).endswith("[]")  # the correction missed
    skill = ("def open(thing: str, *, pull_distance: float = 0.32) -> str:\n    # parameters:\n"
             "    #   pull_distance: default 0.32 m, range [0.1, 0.32] m; how far\n\nThe skill: open\n"
             "The object it acted on: cupboard\n\nThe person's corrections of this skill:\n- A bit less.\n\n"
             "The skill's calls after the correction, in order, each with what the console printed:\n"
             ">>> open('cupboard', pull_distance=0.27)\n'success'\n>>> open('cupboard', pull_distance=0.22)\n'success'\n")
    read = ExtractionDouble(Understanding(0.0)).answer(skill)
    assert read.startswith("Reasoning:") and '"parameters": {"pull_distance": 0.22}' in read  # the last call's value
    assert '"parameters": {}' in ExtractionDouble(Understanding(1.0)).answer(skill)  # the correction missed
    assert "blue cup" in ExtractionDouble(Understanding(0.0)).answer(request)
    with pytest.raises(ValueError, match="noise"):
        Understanding(1.5)


def test_the_table_is_the_mean_and_standard_error_over_trials() -> None:
    from teachbot.evaluation.droc_report import compare, mean_se

    def row(trial: int, method: str, iteration: int, corrections: int, role: str = "same") -> dict:
        return {"trial": trial, "method": method, "task": "t", "level": "skill", "iteration": iteration, "variant": f"v{iteration}",
                "role": role, "corrections": corrections, "success": corrections < 4}

    rows = [row(0, "droc", 1, 2), row(1, "droc", 1, 4), row(2, "droc", 1, 3), row(0, "cap", 1, 2), row(1, "cap", 1, 2),
            row(2, "cap", 1, 2), row(0, "droc", 2, 0), row(1, "droc", 2, 1), row(2, "droc", 2, 0)]
    summary = summarise(rows)
    assert summary["trials"] == 3 and summary["corrections"]["droc"]["all"] == {"1": 3.0, "2": 0.333}
    assert summary["stderr"]["droc"]["all"]["1"] == pytest.approx(0.577, abs=1e-3) and summary["stderr"]["cap"]["all"]["1"] == 0.0
    assert summary["success"]["droc"]["1"] == pytest.approx(2 / 3, abs=1e-3)
    assert "| droc | 3.00 ± 0.58 | 0.33 ± 0.33 |" in format_table(summary)
    assert mean_se([1.0]) == (1.0, None) and mean_se([]) == (None, None)
    assert compare(rows, "droc", "cap", iterations=(1,)).startswith(
        "droc 3.00 ± 0.58, cap 2.00 ± 0.00, difference (cap - droc) -1.00 ± 0.58")


def test_silent_injection_is_the_labelled_option(tmp_path, embedder) -> None:
    tasks = [t for t in load_tasks() if t.id == "drawer_part_open"]
    run_droc(DrocConfig(methods=("droc",), iterations=2, inject=True), tmp_path, double_models(), tasks=tasks, text_embedder=embedder)
    again = {r["iteration"]: r for r in read_results(tmp_path)}[2]
    # the model read the value from the block and wrote it; a keyword the model writes wins, so nothing was left to inject
    assert again["corrections"] == 0 and ">>> open('cupboard', pull_distance=0.22)" in again["transcript"] and again["applied"] == []
    assert json.loads((tmp_path / "droc_settings.json").read_text())["inject"] is True


def test_plan_level_pairs_droc_keeps_what_ours_r_cannot(tmp_path, embedder) -> None:
    """The Table II pairs: DROC's distilled knowledge solves each test task; Ours-R's saved plan does not carry
    over to a request worded otherwise or about other things. A reader that takes the first thing listed and
    puts things in the sink when it does not know better, so that every train task starts wrong."""
    tasks = [t for t in load_tasks() if t.type]
    assert sorted(t.type for t in tasks) == ["common_sense", "feasibility", "preference", "scene"]

    def guess(words: str, candidates) -> str:
        return "sink" if "sink" in candidates else candidates[0]

    run_droc(DrocConfig(methods=("droc", "ours-r"), iterations=2), tmp_path, double_models(guess=guess), tasks=tasks,
             text_embedder=embedder)
    rows = {(r["method"], r["type"], r["role"]): r for r in read_results(tmp_path)}
    for kind in ("preference", "feasibility", "common_sense", "scene"):
        for method in ("droc", "ours-r"):
            assert rows[method, kind, "train"]["corrections"] == 1 and rows[method, kind, "train"]["success"], (method, kind)
        assert rows["droc", kind, "test"]["corrections"] == 0 and rows["droc", kind, "test"]["success"], kind
        assert rows["ours-r", kind, "test"]["corrections"] == 1 and rows["ours-r", kind, "test"]["success"], kind
    # the preference pair: Ours-R is shown the saved plan (a similar request) but its orange juice is not there
    assert "A plan that worked for 'bring me a drink': grasp('orange juice')" in rows["ours-r", "preference", "test"]["shown"]
    assert "does not drink milk" in rows["droc", "preference", "test"]["shown"]
    assert ">>> open('fridge')" in rows["droc", "feasibility", "test"]["transcript"].split("wait_for_trigger()")[1]
    write_summary(tmp_path)
    saved = (tmp_path / "knowledge" / "ours-r" / "plans.jsonl").read_text().splitlines()
    assert len(saved) == 8 and json.loads(saved[0])["statements"] == ["grasp('orange juice')", "handover_object_to_human()"]
    assert [p.name for p in (tmp_path / "knowledge" / "ours-r").iterdir()] == ["plans.jsonl"]  # nothing distilled
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["iterations"] == [] and summary["corrections"] == {}  # the pairs are not Fig. 2's iterated tasks
    assert summary["plan_pairs"]["droc"]["scene"]["test"]["mean"] == 0.0
    assert summary["plan_pairs"]["ours-r"]["common_sense"]["test"]["mean"] == 1.0
    report = (tmp_path / "report.md").read_text()
    assert "the paper's Tables II and III" in report and "common_sense test" in report
