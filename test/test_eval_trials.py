"""`teachbot eval cap --trials N`: the schedule repeated with other seeds, and the report's 95 % intervals.

Trial 0 keeps the seeds and the store a sweep had before there were trials; other trials draw other scenes (and so
the person's sentences) and learn from scratch in stores of their own. One trial's scores get Wilson intervals (s, i)
and a t-interval (n); several trials' scores are means with t-intervals over the per-trial scores.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.cli import main
from teachbot.errors import ConfigError
from teachbot.evaluation.audit import runs as audit_runs
from teachbot.evaluation.metrics import Return, RunRecord, learning_curve, read_results, score, summarize, t_interval, wilson
from teachbot.evaluation.report import write_report
from teachbot.evaluation.sweep import SWEEP_FILE, SweepConfig, open_output, scene_seed, schedule, store_dir, validate

T_975 = {1: 12.706205, 2: 4.302653, 3: 3.182446, 7: 2.364624}  # Student-t 97.5 % quantiles (tables)


def record(trial: int, template: str, run: int, *states: str, method: str = "ours", split: str = "SA-SI") -> RunRecord:
    return RunRecord(method, split, template, run, "put the block in the bowl",
                     tuple(Return(s, "" if s == "success" else "no") for s in states), trial=trial)


def tasks() -> dict[str, type]:
    from teachbot.nodes.eval_sweep import all_tasks

    return all_tasks()


# -- the intervals -------------------------------------------------------------------------------------------------


def test_wilson_interval_against_known_values():
    low, high = wilson(8, 10)
    assert (low, high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    # by hand: centre (p + z²/2n) / (1 + z²/n), half z sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n), z = 1.959964
    z, p, n = 1.959964, 0.8, 10
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert low == pytest.approx(centre - half, abs=1e-6) and high == pytest.approx(centre + half, abs=1e-6)
    assert wilson(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson(0, 0) is None


def test_t_interval_of_a_small_sample_by_hand():
    # mean 2.5, sample sd sqrt(5/3), t(0.975, 3 df) = 3.182446
    half = T_975[3] * math.sqrt(5 / 3) / 2
    assert t_interval([1, 2, 3, 4]) == (pytest.approx(2.5 - half, abs=1e-5), pytest.approx(2.5 + half, abs=1e-5))
    assert t_interval([0.0, 2.0]) == (pytest.approx(1 - T_975[1]), pytest.approx(1 + T_975[1]))
    assert t_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)
    assert t_interval([1.0]) is None and t_interval([]) is None


def test_one_trial_gets_wilson_for_s_and_i_and_a_t_interval_for_n():
    records = [record(0, "a", 0, "success"), record(0, "a", 1, "failure", "success"), record(0, "a", 2, "failure", "success"),
               record(0, "a", 3, "failure", "failure", "failure", "failure")]
    scores = score(records)
    assert (scores.s, scores.i, scores.n, scores.runs, scores.trials, scores.over) == (75.0, 25.0, pytest.approx(2 / 3), 4, 1,
                                                                                        "runs")
    assert scores.s_ci == tuple(pytest.approx(100 * x) for x in wilson(3, 4))
    assert scores.i_ci == tuple(pytest.approx(100 * x) for x in wilson(1, 4))
    # n over the successful runs' corrections [0, 1, 1]: mean 2/3, sd sqrt(1/3), 2 df; clipped at 0 below
    half = T_975[2] * math.sqrt(1 / 3) / math.sqrt(3)
    assert scores.n_ci == (0.0, pytest.approx(2 / 3 + half, abs=1e-5))


def test_several_trials_get_the_mean_with_a_t_interval_over_the_trials():
    # per trial (2 runs each): s 100, 50, 100; i 50, 0, 100; n 0.5, 1, 0
    records = [record(0, "a", 0, "success"), record(0, "a", 1, "failure", "success"),
               record(1, "a", 0, "failure", "success"), record(1, "a", 1, "timeout"),
               record(2, "a", 0, "success"), record(2, "a", 1, "success")]
    scores = score(records)
    assert (scores.runs, scores.trials, scores.over) == (6, 3, "trials")
    assert (scores.s, scores.i, scores.n) == (pytest.approx(250 / 3), pytest.approx(50.0), pytest.approx(0.5))

    def by_hand(values):
        half = T_975[2] * statistics.stdev(values) / math.sqrt(len(values))
        return statistics.fmean(values) - half, statistics.fmean(values) + half

    s_low, _ = by_hand([100, 50, 100])
    assert scores.s_ci == (pytest.approx(s_low), 100.0)  # clipped to what a share can be
    assert scores.i_ci == (0.0, 100.0)  # 50 ± 124: clipped at both ends
    assert scores.n_ci == (0.0, pytest.approx(by_hand([0.5, 1.0, 0.0])[1]))
    # a trial where nothing succeeded has no n: the mean and interval of n are over the others
    none = score([*records[:2], record(1, "a", 0, "failure"), record(1, "a", 1, "failure")])
    assert none.n == 0.5 and none.n_ci is None and none.s == 50.0


def test_the_summary_keeps_its_keys_and_gains_the_intervals_on_request():
    records = [record(t, "a", k, "success") for t in range(2) for k in range(2)]
    assert summarize(records) == {"ours": {"SA-SI": {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 4}}}
    cell = summarize(records, intervals=True)["ours"]["SA-SI"]
    assert cell == {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 4, "trials": 2,
                    "ci95": {"s": [100.0, 100.0], "i": [100.0, 100.0], "n": [0.0, 0.0], "over": "trials"}}


def test_a_results_line_carries_its_trial_and_an_old_line_reads_as_trial_0(tmp_path):
    path = tmp_path / "results.jsonl"
    new = record(2, "a", 1, "success")
    old = {k: v for k, v in record(0, "a", 0, "success").to_json().items() if k != "trial"}
    path.write_text(json.dumps(old) + "\n" + json.dumps(new.to_json()) + "\n")
    assert new.to_json()["trial"] == 2
    assert [r.trial for r in read_results(path)] == [0, 2] and read_results(path)[1] == new


def test_the_learning_curve_per_run_index_has_intervals_over_trials():
    records = [record(t, tpl, k, "success" if k or t == 0 else "failure") for t in range(2) for tpl in "ab" for k in range(2)]
    (first, second) = learning_curve(records)[("ours", "SA-SI")]
    assert first[0] == 0 and first[1].i == 50.0 and first[1].over == "trials" and first[1].i_ci == (0.0, 100.0)
    assert second[1].i == 100.0 and second[1].i_ci == (100.0, 100.0)


# -- the schedule, the seeds and the stores ------------------------------------------------------------------------


def test_trial_0_keeps_todays_seeds_and_other_trials_draw_others():
    assert scene_seed(0, "SA-SI", "block_in_bowl", 3) == 5431679616848167879  # the seed before there were trials
    assert scene_seed(0, "SA-SI", "block_in_bowl", 3, trial=0) == 5431679616848167879
    seeds = {scene_seed(0, "SA-SI", "block_in_bowl", 3, trial=t) for t in range(5)}
    assert len(seeds) == 5


def test_the_schedule_repeats_per_trial_and_trial_0_is_the_old_schedule():
    found = tasks()
    one = schedule(SweepConfig(methods=("ours", "cap"), splits=("SA-SI", "UA-UI"), runs=2, templates=2), found)
    three = schedule(SweepConfig(methods=("ours", "cap"), splits=("SA-SI", "UA-UI"), runs=2, templates=2, trials=3), found)
    assert len(three) == 3 * len(one) == 3 * 16 and len({r.key for r in three}) == len(three)
    assert [r for r in three if r.trial == 0] == one
    assert [(r.method, r.trial) for r in three][::8] == [("ours", 0), ("ours", 1), ("ours", 2), ("cap", 0), ("cap", 1),
                                                         ("cap", 2)]
    first, other = (next(r for r in three if r.trial == t and r.method == "ours") for t in (0, 1))
    assert (first.split, first.template, first.run) == (other.split, other.template, other.run) and first.seed != other.seed
    assert {r.seed for r in three if r.method == "ours"} == {r.seed for r in three if r.method == "cap"}  # same work
    assert store_dir(Path("out"), "ours") == store_dir(Path("out"), "ours", 0) == Path("out/stores/ours")
    assert store_dir(Path("out"), "ours", 2) == Path("out/stores/trial-2/ours")


def test_zero_trials_is_one_clear_line():
    with pytest.raises(ConfigError, match=r"--trials must be at least 1 \(1: the schedule once"):
        validate(SweepConfig(methods=("ours",), trials=0), tasks(), ["ours"])


def test_resume_with_trials_and_an_old_sweep_json_without_them(tmp_path):
    config = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_in_bowl",), trials=2)
    assert open_output(tmp_path / "new", config) == set()
    assert json.loads((tmp_path / "new" / SWEEP_FILE).read_text())["trials"] == 2
    (tmp_path / "new" / "results.jsonl").write_text(
        "".join(json.dumps(record(t, "block_in_bowl", 0, "success").to_json()) + "\n" for t in (0, 1)))
    done = open_output(tmp_path / "new", config)
    assert done == {("ours", "SA-SI", "block_in_bowl", 0, 0), ("ours", "SA-SI", "block_in_bowl", 0, 1)}
    left = [r.key for r in schedule(config, tasks()) if r.key not in done]
    assert left == [("ours", "SA-SI", "block_in_bowl", 1, 0), ("ours", "SA-SI", "block_in_bowl", 1, 1)]
    with pytest.raises(ConfigError, match="holds another sweep .*trials.*a higher --trials adds trials"):
        open_output(tmp_path / "new", SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_in_bowl",)))

    # a sweep.json written before trials existed, and its lines without a trial: the same sweep, trial 0
    old = tmp_path / "old"
    old.mkdir()
    single = SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2, only=("block_in_bowl",))
    held = {k: v for k, v in single.to_json().items() if k != "trials"}
    (old / SWEEP_FILE).write_text(json.dumps(held))
    line = {k: v for k, v in record(0, "block_in_bowl", 0, "success").to_json().items() if k != "trial"}
    (old / "results.jsonl").write_text(json.dumps(line) + "\n")
    assert open_output(old, single) == {("ours", "SA-SI", "block_in_bowl", 0, 0)}
    assert json.loads((old / SWEEP_FILE).read_text()) == held  # resumed as it was, nothing rewritten
    with pytest.raises(ConfigError, match="differs in runs"):
        open_output(old, SweepConfig(methods=("ours",), splits=("SA-SI",), runs=3, only=("block_in_bowl",)))
    # more trials of the same sweep go on where it is
    assert open_output(old, config) == {("ours", "SA-SI", "block_in_bowl", 0, 0)}
    assert json.loads((old / SWEEP_FILE).read_text())["trials"] == 2


def test_the_estimate_counts_every_trial():
    from teachbot.evaluation.estimate import estimate
    from teachbot.llm.pricing import Price

    prices = {"m": Price(input=1.0, cached_input=0.5, output=2.0)}
    roles = {"interaction": "m", "function_generation": "m", "improvement": "m"}
    one, two = (estimate(SweepConfig(methods=("ours", "cap"), splits=("SA-SI",), runs=2, templates=2, trials=t), tasks(),
                         prices, roles) for t in (1, 2))
    for a, b in zip(one, two):
        assert (b.method, b.runs) == (a.method, 2 * a.runs) and a.runs == 4
        assert (b.cost.low, b.cost.high) == (pytest.approx(2 * a.cost.low), pytest.approx(2 * a.cost.high)) and a.cost.high > 0


def test_the_cli_refuses_zero_trials_and_estimates_with_trials(capsys):
    args = ["eval", "cap", "--methods", "ours", "--splits", "SA-SI", "--runs", "2", "--templates", "1",
            "--llm-model", "gpt-4o-mini", "--out", "unused", "--estimate"]
    assert main([*args, "--trials", "0"]) == 2
    assert "error: --trials must be at least 1" in capsys.readouterr().err
    assert main([*args, "--trials", "3"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if row.startswith("ours ")]
    assert line.split()[1] == "6"  # 1 template x 2 runs x 3 trials


# -- the report and the run listing --------------------------------------------------------------------------------


def test_the_report_with_trials_names_its_intervals_and_lists_runs_with_their_trial(tmp_path):
    records = [record(t, tpl, k, *(["success"] if k or t == 1 else ["failure", "success"]))
               for t in range(2) for tpl in "ab" for k in range(2)]
    (tmp_path / SWEEP_FILE).write_text(json.dumps(SweepConfig(methods=("ours",), splits=("SA-SI",), runs=2,
                                                              trials=2).to_json()))
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    report = write_report(tmp_path).read_text()
    # i per trial: 50 (trial 0), 100 (trial 1): mean 75, 75 ± t(1 df) * 25 clipped; s 100 both; n 0.5 and 0
    assert "95 % intervals in brackets and as error bars (2 trials); several trials: each score is the mean" in report
    n_half = T_975[1] * statistics.stdev([0.5, 0.0]) / math.sqrt(2)
    assert f"| **ours** | 100.0 [100.0, 100.0] | 75.0 [0.0, 100.0] | 0.25 [0.00, {0.25 + n_half:.2f}] |" in report
    cell = json.loads((tmp_path / "summary.json").read_text())["ours"]["SA-SI"]
    assert cell["trials"] == 2 and cell["ci95"]["over"] == "trials" and cell["ci95"]["i"] == [0.0, 100.0]
    assert (cell["s"], cell["i"], cell["n"], cell["runs"]) == (100.0, 75.0, 0.25, 8)
    assert (tmp_path / "curve_SA-SI.png").read_bytes()[:4] == b"\x89PNG"
    names = [line.key for line in audit_runs(tmp_path)]
    assert names[0] == "ours/SA-SI/a/0/trial-0" and names[-1] == "ours/SA-SI/b/1/trial-1" and len(set(names)) == 8
    (tmp_path / SWEEP_FILE).unlink()  # another evaluation's directory, or a one-trial sweep: names as before
    (tmp_path / "results.jsonl").write_text(json.dumps(records[0].to_json()) + "\n")
    assert [line.key for line in audit_runs(tmp_path)] == ["ours/SA-SI/a/0"]


# -- end to end, on the simulated stack ----------------------------------------------------------------------------


@pytest.mark.timeout(pytest_timeout(600))
def test_a_sweep_with_two_trials_learns_from_scratch_in_each(client, tmp_path):
    """The imitator succeeds at once only with a fitting example in its prompt (no seed examples here): in each trial
    the first run needs a correction and its lesson, in that trial's own store, makes the second succeed at once. Had
    trial 1 seen trial 0's store, its first run would succeed at once. Trial 0's runs have the seeds they had before
    trials; a second start resumes with nothing to do."""
    from teachbot.evaluation.doubles import ImitatorModel, TeacherModel
    from teachbot.evaluation.harness import AgentModels
    from teachbot.evaluation.person import PersonConfig
    from teachbot.nodes.eval_sweep import run_sweep

    def make(method):
        return AgentModels(ImitatorModel(), None, TeacherModel())

    (tmp_path / "no_seeds" / "tabletop").mkdir(parents=True)
    config = SweepConfig(methods=("ours",), splits=("UA-SI",), runs=2, only=("block_in_bowl",), seed=3, trials=2,
                         person=PersonConfig(remember_share=1.0), seeds_dir=str(tmp_path / "no_seeds"))
    out = tmp_path / "sweep"
    results = run_sweep(config, out, make, show_progress=False, client=client)
    records = read_results(results)
    assert [(r.trial, r.run) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r.initial_success for r in records] == [False, True, False, True], [r.returns for r in records]
    assert [r.extra["seed"] for r in records[:2]] == [scene_seed(3, "UA-SI", "block_in_bowl", k) for k in range(2)]
    assert records[2].extra["seed"] == scene_seed(3, "UA-SI", "block_in_bowl", 0, trial=1) != records[0].extra["seed"]
    assert len(list((out / "stores" / "ours").glob("*.json"))) == 1
    assert len(list((out / "stores" / "trial-1" / "ours").glob("*.json"))) == 1
    before = results.read_text()
    run_sweep(config, out, make, show_progress=False, client=client)
    assert results.read_text() == before
    write_report(out)
    cell = json.loads((out / "summary.json").read_text())["ours"]["UA-SI"]
    assert (cell["trials"], cell["i"], cell["ci95"]["i"]) == (2, 50.0, [50.0, 50.0])
