"""s, i and n exactly as the core paper defines them, on hand-made runs with known answers."""

from __future__ import annotations

import json

import pytest

from teachbot.evaluation.metrics import Return, RunRecord, learning_curve, read_results, score, summarize


def run(method, split, template, index, *states):
    return RunRecord(method, split, template, index, f"instruction {index}",
                     tuple(Return(s, "" if s == "success" else "no, that is wrong") for s in states))


def test_an_oracle_scores_all_success_at_once():
    records = [run("oracle", "SA-SI", f"t{t}", k, "success") for t in range(8) for k in range(10)]
    assert score(records).to_json() == {"s": 100.0, "i": 100.0, "n": 0.0, "runs": 80}


def test_a_model_that_errs_once_then_follows_the_correction():
    records = [run("err-once", "UA-SI", "t0", k, "failure", "success") for k in range(10)]
    scores = score(records)
    assert (scores.s, scores.i, scores.n) == (100.0, 0.0, 1.0)


def test_mixed_outcomes_give_the_paper_definitions():
    records = [
        run("m", "UA-UI", "t0", 0, "success"),                      # i, n = 0
        run("m", "UA-UI", "t0", 1, "failure", "success"),           # n = 1
        run("m", "UA-UI", "t0", 2, "error", "timeout", "success"),  # n = 2
        run("m", "UA-UI", "t0", 3, "failure", "failure", "failure", "failure"),  # never: not in n
    ]
    scores = score(records)
    assert scores.s == 75.0 and scores.i == 25.0 and scores.n == pytest.approx(1.0)
    assert [r.outcome for r in records] == ["success", "success", "success", "failure"]
    assert [r.interactions_until_success for r in records] == [0, 1, 2, None]
    assert score([run("m", "x", "t", 0, "timeout")]).to_json() == {"s": 0.0, "i": 0.0, "n": None, "runs": 1}
    assert run("m", "x", "t", 0, "failure", "error").outcome == "error"  # the last state of a run that never succeeded


def test_summary_per_method_and_split_and_per_template():
    records = [run("ours", "SA-SI", "a", 0, "success"), run("ours", "SA-SI", "b", 0, "failure", "success"),
               run("cap", "SA-SI", "a", 0, "error")]
    summary = summarize(records)
    assert summary == {"cap": {"SA-SI": {"s": 0.0, "i": 0.0, "n": None, "runs": 1}},
                       "ours": {"SA-SI": {"s": 100.0, "i": 50.0, "n": 0.5, "runs": 2}}}
    assert summarize(records, by_template=True)["ours"]["SA-SI"]["b"]["n"] == 1.0


def test_learning_curves_and_the_results_file_round_trip(tmp_path):
    records = [run("ours", "SA-SI", t, k, *(["success"] if k >= 1 else ["failure", "success"])) for t in "ab" for k in range(3)]
    curve = learning_curve(records)[("ours", "SA-SI")]
    assert [(k, s.i) for k, s in curve] == [(0, 0.0), (1, 100.0), (2, 100.0)]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    line = json.loads(path.read_text().splitlines()[0])
    assert line["outcome"] == "success" and line["interactions_until_success"] == 1
    assert line["returns"] == [{"state": "failure", "utterance": "no, that is wrong"}, {"state": "success", "utterance": ""}]
    assert read_results(path) == records
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1 is not a run record"):
        read_results(path)


def test_an_unknown_state_is_refused():
    with pytest.raises(ValueError, match="success, failure, error, timeout"):
        Return("crashed")


def test_the_report_has_the_papers_table_layout_the_published_numbers_and_curves(tmp_path):
    from teachbot.evaluation.report import write_report

    records = [run("ours", split, t, k, *(["success"] if k else ["failure", "success"])) for split in ("SA-SI", "UA-UI")
               for t in "ab" for k in range(4)]
    records.append(run("cap", "SA-SI", "a", 0, "error"))
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    published = {"GPT-4": {"SA-SI": {"s": 100, "i": 97.5, "n": 0.04}, "UA-SI": {"s": 100, "i": 92.5, "n": 0.14}}}
    report = write_report(tmp_path, published).read_text()
    assert "| method | SA-SI s | SA-SI i | SA-SI n | UA-SI s | UA-SI i | UA-SI n | UA-UI s | UA-UI i | UA-UI n |" in report
    # one trial: Wilson for s (8/8) and i (6/8), a t-interval for n over the 8 successful runs' corrections (clipped at 0)
    ours = "100.0 [67.6, 100.0] | 75.0 [40.9, 92.9] | 0.25 [0.00, 0.64]"
    assert f"| **ours** | {ours} | – | – | – | {ours} |" in report
    assert "| **cap** | 0.0 [0.0, 79.3] | 0.0 [0.0, 79.3] | – | – | – | – | – | – | – |" in report
    assert "| GPT-4 (published) | 100.0 | 97.5 | 0.04 | 100.0 | 92.5 | 0.14 | – | – | – |" in report
    assert "95 % intervals in brackets and as error bars (1 trial); one trial: a Wilson score interval for s and i" in report
    assert json.loads((tmp_path / "summary.json").read_text())["ours"]["UA-UI"] == {
        "s": 100.0, "i": 75.0, "n": 0.25, "runs": 8, "trials": 1,
        "ci95": {"s": [67.559, 100.0], "i": [40.928, 92.852], "n": [0.0, 0.637], "over": "runs"}}
    for split in ("SA-SI", "UA-UI"):
        png = tmp_path / f"curve_{split}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png.name})" in report
