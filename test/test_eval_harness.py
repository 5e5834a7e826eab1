"""Offline proof of the evaluation's mechanics with stand-in models (they prove the harness, not any model):
an oracle scores s = i = 100, n = 0; a model that errs once scores i = 0, s = 100, n = 1; a stand-in that
imitates the closest example in its prompt gets better over the runs of a template only when it learns."""

from __future__ import annotations

import json

import numpy as np
import pytest
from timing import pytest_timeout

from teachbot.errors import ConfigError
from teachbot.evaluation.doubles import ErrOnceModel, ImitatorModel, OracleModel, TeacherModel
from teachbot.evaluation.harness import AgentModels
from teachbot.evaluation.metrics import read_results, summarize
from teachbot.evaluation.person import PersonConfig
from teachbot.evaluation.report import write_report
from teachbot.evaluation.sweep import SweepConfig
from teachbot.nodes.eval_sweep import run_sweep
from teachbot.tracing.jsonl import read_spans
from teachbot.tracing.setup import installed

pytestmark = pytest.mark.timeout(pytest_timeout(900))


def factory(kind):
    def make(method):
        interaction = {"oracle": OracleModel, "err-once": ErrOnceModel, "imitator": ImitatorModel}[kind]()
        return AgentModels(interaction, None, TeacherModel())
    return make


def test_an_oracle_scores_full_marks(client, tmp_path):
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=1, templates=3, seed=1)
    results = run_sweep(config, tmp_path, factory("oracle"), show_progress=False, client=client)
    records = read_results(results)
    assert len(records) == 3 and {r.template for r in records} == {"block_on_block", "block_in_bowl", "all_blocks_on_point"}
    assert summarize(records) == {"ours": {"SA-SI": {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 3}}}, \
        [(r.template, r.returns) for r in records]
    line = json.loads(results.read_text().splitlines()[0])
    assert set(line) >= {"method", "split", "template", "run", "instruction", "returns", "outcome",
                         "interactions_until_success", "tokens", "cost_usd", "wall_s"}
    # every run is a trace of its own (as an episode on the robot is), named in its result line
    tracing = installed()
    assert tracing is not None and tracing.flush(10.0)
    spans = read_spans(tracing.directory)
    for record in records:
        trace = [r for r in spans if r.trace_id == record.extra["trace_id"]]
        (root,) = [r for r in trace if r.parent_id is None]
        assert root.name == "evaluation.run" and root.attributes["evaluation.task"] == record.template
        episodes = [r for r in trace if r.name == "episode"]
        assert episodes and all(e.parent_id == root.span_id for e in episodes)
        assert any(r.name == "skill.execute" and r.attributes["teachbot.node"] == "skills" for r in trace)


def test_a_model_that_errs_once_then_follows_the_correction(client, tmp_path):
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_in_bowl",), seed=2,
                         person=PersonConfig(remember_share=0.0))
    records = read_results(run_sweep(config, tmp_path, factory("err-once"), show_progress=False, client=client))
    assert summarize(records)["ours"]["SA-SI"] == {"s": 100.0, "i": 0.0, "n": 1.0, "runs": 2}
    first = records[0].returns
    assert first[0].state == "failure" and "should be" in first[0].utterance or "bowl" in first[0].utterance


def test_learning_raises_initial_success_over_the_runs_of_a_template(client, tmp_path):
    """The imitator succeeds at once only with a fitting example in its prompt: after the first correction
    (with 'remember'), ours has the learned lesson; ours-no-learning never does. No seed examples here: the
    shipped seeds already show this template, and the imitator would copy them from the first run on."""
    (tmp_path / "no_seeds" / "tabletop").mkdir(parents=True)
    config = SweepConfig(methods=("ours", "ours-no-learning"), splits=("UA-SI",), runs=4, only=("block_in_bowl",),
                         seed=3, person=PersonConfig(remember_share=1.0), seeds_dir=str(tmp_path / "no_seeds"))
    records = read_results(run_sweep(config, tmp_path / "sweep", factory("imitator"), show_progress=False, client=client))
    by_method = {m: [r for r in records if r.method == m] for m in config.methods}
    ours = [r.initial_success for r in sorted(by_method["ours"], key=lambda r: r.run)]
    without = [r.initial_success for r in sorted(by_method["ours-no-learning"], key=lambda r: r.run)]
    assert ours == [False, True, True, True], [r.returns for r in by_method["ours"]]
    assert without == [False, False, False, False]
    assert all(r.outcome == "success" for r in records)  # the corrections get every run done
    learned = list((tmp_path / "sweep" / "stores" / "ours").glob("*.json"))
    assert len(learned) == 1 and not list((tmp_path / "sweep" / "stores" / "ours-no-learning").glob("*.json"))


def test_bad_input_is_one_clear_line_and_nothing_is_overwritten(client, tmp_path):
    with pytest.raises(ConfigError, match="unknown split 'XX-YY'"):
        run_sweep(SweepConfig(methods=("ours",), splits=("XX-YY",)), tmp_path / "a", factory("oracle"), client=client)
    with pytest.raises(ConfigError, match="unknown template 'juggling'"):
        run_sweep(SweepConfig(methods=("ours",), only=("juggling",)), tmp_path / "b", factory("oracle"), client=client)
    with pytest.raises(ConfigError, match="unknown method 'magic'"):
        run_sweep(SweepConfig(methods=("magic",)), tmp_path / "c", factory("oracle"), client=client)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds no sweep"):
        run_sweep(SweepConfig(methods=("ours",), runs=1, templates=1), other, factory("oracle"), client=client)
    assert (other / "notes.txt").read_text() == "mine"
    done = tmp_path / "done"
    run_sweep(SweepConfig(methods=("ours",), splits=("SA-SI",), runs=1, only=("block_on_block",)), done,
              factory("oracle"), show_progress=False, client=client)
    before = (done / "results.jsonl").read_text()
    with pytest.raises(ConfigError, match="holds another sweep .*runs"):
        run_sweep(SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_on_block",)), done,
                  factory("oracle"), client=client)
    # the same settings resume: nothing to do, nothing rewritten
    run_sweep(SweepConfig(methods=("ours",), splits=("SA-SI",), runs=1, only=("block_on_block",)), done,
              factory("oracle"), show_progress=False, client=client)
    assert (done / "results.jsonl").read_text() == before


def test_the_imitator_carries_the_differing_words_over_at_once():
    from teachbot.evaluation.doubles import phrase_swaps, swap_literals

    before, after = "pick up the cyan block and place it on the purple bowl", "pick up the purple block and place it on the pink bowl"
    swaps = phrase_swaps(before.split(" "), after.split(" "))
    assert swaps == [("cyan", "purple"), ("purple", "pink")]
    assert swap_literals("put_first_on_second('cyan block', 'purple bowl')", swaps) == \
        "put_first_on_second('purple block', 'pink bowl')"
    assert swap_literals("say(cyan)", swaps) == "say(cyan)"  # names outside string literals stay


def test_an_llm_outage_stops_the_sweep_and_records_nothing(client, tmp_path):
    from teachbot.llm.base import LLMError
    from teachbot.llm.scripted import ScriptedModel

    calls = []

    def down(prompt):
        calls.append(prompt)
        raise LLMError("LLM endpoint http://127.0.0.1:9/v1 still failing after 5 attempts (last: HTTP 503)")

    def make(method):
        return AgentModels(ScriptedModel(respond=down), None, TeacherModel())

    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=3, only=("block_in_bowl",))
    with pytest.raises(LLMError, match="sweep stopped at ours SA-SI block_in_bowl run 0; run the same command again"):
        run_sweep(config, tmp_path, make, show_progress=False, client=client)
    assert len(calls) == 1  # one call for the first run, then nothing: no loop over a dead endpoint
    assert not (tmp_path / "results.jsonl").exists() or (tmp_path / "results.jsonl").read_text() == ""


class Refuser:
    """A stand-in whose every statement fails (a name the console does not have): the console gives up on errors."""

    def __init__(self):
        from teachbot.llm.scripted import ScriptedModel

        self.model = ScriptedModel(respond=lambda prompt: "do_the_impossible()", name="interaction:refuser")

    def __call__(self, method):
        return AgentModels(self.model, None, TeacherModel())


@pytest.mark.parametrize("deviations", [(), ("continue-after-errors",)])
def test_an_error_ends_the_run_unless_the_deviation_is_on(client, tmp_path, deviations):
    """The paper: an unhandled error ends the run. The named deviation lets the person correct and go on."""
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=1, only=("block_in_bowl",), seed=4,
                         person=PersonConfig(max_corrections=2), deviations=deviations)
    (record,) = read_results(run_sweep(config, tmp_path, Refuser(), show_progress=False, client=client))
    states = [r.state for r in record.returns]
    if deviations:
        assert states == ["error", "error", "error"], states  # corrected twice, then out of corrections
    else:
        assert states == ["error"], states
    assert json.loads((tmp_path / "sweep.json").read_text())["deviations"] == list(deviations)
    report = write_report(tmp_path).read_text()
    assert ("continue-after-errors (when the console gives up" in report) == bool(deviations)
    assert ("Protocol: the core paper's (an error or timeout ends a run" in report) != bool(deviations)


def test_the_clock_counts_robot_time_and_never_undoes_a_success(client, tmp_path):
    """A run timeout far below the oracle's motion time: the task done is still a success (the clock used to turn
    it into a timeout), and the run took far longer than the timeout on the robot's clock."""
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=1, only=("block_in_bowl",), seed=5, run_timeout=0.01)
    (record,) = read_results(run_sweep(config, tmp_path, factory("oracle"), show_progress=False, client=client))
    assert [r.state for r in record.returns] == ["success"]


def test_unknown_deviation_is_one_clear_line(client, tmp_path):
    with pytest.raises(ConfigError, match="unknown deviation 'no-person'; deviations from the paper's protocol: "
                                          "continue-after-errors, wall-clock-timeout"):
        run_sweep(SweepConfig(methods=("ours",), deviations=("no-person",)), tmp_path, factory("oracle"), client=client)


def test_the_person_draws_the_same_for_a_run_whatever_came_before():
    """Every method hears the same sentences for the same run, and a resume too: the person's generator is seeded by
    the run, not shared across a method's runs."""
    from teachbot.evaluation.harness import EvalDialog, PreparedRun
    from teachbot.evaluation.person import TemplatePerson

    def sentences(dialog, run, n=6):
        dialog.start(run)
        return [dialog.react(None).utterance for _ in range(n)]

    def run_of(number):
        return PreparedRun("ours", "SA-SI", "block_in_bowl", number, "put the red block in the blue bowl",
                           check=lambda: (False, "the red block is not in the blue bowl"), extra={"seed": 11})

    person = PersonConfig(remember_share=0.5, max_corrections=10)
    fresh = EvalDialog(TemplatePerson(person, np.random.default_rng(0)), 300.0)
    busy = EvalDialog(TemplatePerson(person, np.random.default_rng(99)), 300.0)
    sentences(busy, run_of(0), n=9)  # another method heard more before (more corrections in its earlier runs)
    assert sentences(busy, run_of(1)) == sentences(fresh, run_of(1))
    assert sentences(fresh, run_of(1)) != sentences(fresh, run_of(2))  # other runs, other draws


def test_the_person_answers_a_question_from_what_is_still_wrong():
    """ask() gets an answer from the diagnosis (which object, where), not the request repeated; nothing is recorded
    as a return of control; when the task is done, the person says so."""
    from teachbot.evaluation.harness import EvalDialog, PreparedRun
    from teachbot.evaluation.person import TemplatePerson

    state = {"done": False}
    run = PreparedRun("ours", "SA-SI", "block_in_bowl", 0, "put the block in the blue bowl",
                      check=lambda: (state["done"], "" if state["done"] else
                                     "the red block is not in the blue bowl: it is on the table near the middle"))
    dialog = EvalDialog(TemplatePerson(PersonConfig(), np.random.default_rng(0)), 300.0)
    dialog.start(run)
    dialog.wait_for_trigger()  # the request
    answer = dialog.ask("Which block do you mean?")["text"]
    assert "red block" in answer and "blue bowl" in answer and not answer.startswith("I asked you")
    assert dialog.returns == [] and dialog.said == ["Which block do you mean?"]
    state["done"] = True
    assert dialog.ask("Anything else?")["text"] in ("It's fine as it is.", "Nothing more, it is done.")


class RefusedOnce:
    """An endpoint that refuses the first run's requests with HTTP 400 (say, a prompt its filter rejects), then
    answers as the oracle does."""

    def __init__(self):
        self.oracle, self.calls = OracleModel(), 0

    def generate(self, prompt, stop=None, **kwargs):
        from teachbot.llm.base import REFUSED, LLMError

        self.calls += 1
        if self.calls == 1:
            raise LLMError("LLM endpoint http://127.0.0.1:9/v1 refused the request (HTTP 400): bad prompt", kind=REFUSED, status=400)
        return self.oracle.generate(prompt, stop, **kwargs)

    def __getattr__(self, name):
        return getattr(self.oracle, name)


def test_a_refused_request_is_that_runs_error_and_the_sweep_goes_on(client, tmp_path):
    """A deterministic HTTP 400 would be refused again on a resume: it ends its run as an error with the reason, and
    the next run goes on (an unreachable endpoint still stops the sweep: test_an_llm_outage_stops_the_sweep...)."""
    model = RefusedOnce()
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_in_bowl",), seed=6)
    first, second = read_results(run_sweep(config, tmp_path, lambda method: AgentModels(model, None, TeacherModel()),
                                           show_progress=False, client=client))
    assert [r.state for r in first.returns] == ["error"]
    assert "refused this run's request" in first.extra["error"] and "HTTP 400" in first.extra["error"]
    assert [r.state for r in second.returns] == ["success"] and "error" not in second.extra


class Priced:
    """The oracle, as billed by a hosted model: each answer priced as gpt-4.1 with 20k prompt tokens (config/prices.yaml)."""

    name = "interaction:gpt-4.1"

    def __init__(self):
        self.oracle, self.listeners = OracleModel(), []

    def add_listener(self, listener):
        self.listeners.append(listener)

    def generate(self, prompt, stop=None, **kwargs):
        import dataclasses

        completion = dataclasses.replace(self.oracle.generate(prompt, stop, **kwargs), model="gpt-4.1", prompt_tokens=20_000)
        for listener in self.listeners:
            listener(completion, prompt)
        return completion

    def __getattr__(self, name):
        return getattr(self.oracle, name)


def test_max_cost_stops_between_runs_and_a_higher_cap_goes_on(client, tmp_path):
    from teachbot.nodes.eval_sweep import spent

    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=3, only=("block_in_bowl",), seed=7)
    model = Priced()
    make = lambda method: AgentModels(model, None, TeacherModel())  # noqa: E731
    first = read_results(run_sweep(config, tmp_path, make, show_progress=False, client=client, max_cost=0.01))
    assert len(first) == 1 and first[0].cost_usd > 0.01  # the run in progress finished; no other started
    assert spent(tmp_path) == pytest.approx(first[0].cost_usd)
    resumed = read_results(run_sweep(config, tmp_path, make, show_progress=False, client=client, max_cost=10.0))
    assert [r.run for r in resumed] == [0, 1, 2]


def test_an_evaluated_prompt_is_trimmed_as_the_robots_is(tmp_path):
    """The eval's console runs with the robot's token budget (config/interaction.yaml), not an unlimited one."""
    from teachbot.config import load_yaml
    from teachbot.evaluation.harness import METHODS, ConsoleAgent
    from teachbot.paths import config_path

    robot = load_yaml(config_path("interaction.yaml"))["interaction"]
    agent = ConsoleAgent(METHODS["ours"], tmp_path / "store", AgentModels(OracleModel(), None, TeacherModel()), skills=None,
                         objects=dict, person=PersonConfig(), seed=0)
    try:
        assert agent.core.config.context_tokens == int(robot["context_tokens"]) > 0
        assert agent.core.config.reserve_tokens == int(robot["reserve_tokens"])
    finally:
        agent.close()


def test_no_evaluated_prompt_offers_a_function_the_evaluation_does_not_serve(tmp_path):
    """check_action needs the issue detection node, which the paper's protocol does not run: no method's prompt offers
    it (it would only answer "not available")."""
    from teachbot.evaluation.baselines import BaselineAgent
    from teachbot.evaluation.harness import METHODS, ConsoleAgent
    from teachbot.language.registry import RobotApi

    assert "check_action" in RobotApi.load("tabletop").names  # the robot's own API has it
    models = AgentModels(OracleModel(), None, TeacherModel())
    console = ConsoleAgent(METHODS["ours"], tmp_path / "a", models, skills=None, objects=dict, person=PersonConfig(), seed=0)
    baseline = BaselineAgent(METHODS["cap"], tmp_path / "b", models, skills=None, objects=dict, person=PersonConfig(), seed=0)
    try:
        assert "check_action" not in console.core.prompts.base() and "def say(" in console.core.prompts.base()
        assert "check_action" not in baseline.prompt.build(["red block"], [], "put the red block in the bowl", [])
    finally:
        console.close()
        baseline.close()
