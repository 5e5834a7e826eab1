"""DROC's evaluation, its files: reading results.jsonl (old method names included) and the summary and report.

``summarise`` turns the results' lines into corrections per iteration (per task the mean over the iteration's
variants, then the mean over the tasks, per method); ``write_summary`` writes summary.json and report.md.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS, SETTINGS, LOOKS = "results.jsonl", "droc_settings.json", "looks.jsonl"
log = logging.getLogger(__name__)

# old method names still read (command line, saved results and stores) -> their names now
RENAMED = {"droc-all-history": "droc-retrieve-all"}


def method_name(name: str, where: str = "the command line") -> str:
    """``name`` as it is called now; an old name is accepted with a deprecation warning (naming ``where``)."""
    new = RENAMED.get(name)
    if new is None:
        return name
    log.warning("DROC method %r (in %s) is deprecated: it is %r now (it turns off the retrieval's selection; the paper's "
                "Ours-E, the handler given the whole history, is 'droc-full-history')", name, where, new)
    return new


def read_results(out: Path) -> list[dict[str, Any]]:
    """The lines of ``out``'s results.jsonl; a renamed method's old name is read as its new one (with a warning)."""
    path = out / RESULTS
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for old in sorted({r.get("method") for r in rows} & RENAMED.keys()):
        new = method_name(old, str(path))
        for row in rows:
            if row.get("method") == old:
                row["method"] = new
    return rows


def read_looks(out: Path) -> list[dict[str, Any]]:
    """The lines of ``out``'s looks.jsonl (the upright/flipped retrieval, one per trial)."""
    path = out / LOOKS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def looks_summary(looks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The upright/flipped retrieval accuracy over the trials: mean ± standard error, with and without images."""
    if not looks:
        return {}
    with_looks, by_words = mean_se([r["accuracy"] for r in looks]), mean_se([r["no_visual_accuracy"] for r in looks])
    return {"trials": len(looks), "queries": sum(r["queries"] for r in looks), "hits": sum(r["hits"] for r in looks),
            "accuracy": with_looks[0], "accuracy_se": with_looks[1], "no_visual_accuracy": by_words[0],
            "no_visual_accuracy_se": by_words[1], "descriptor": looks[0]["descriptor"]}


def looks_lines(looks: Sequence[Mapping[str, Any]], threshold: float | None = None) -> list[str]:
    """The report's section on the upright/flipped retrieval ([] when it did not run)."""
    found = looks_summary(looks)
    if not found:
        return []
    return ["## Upright or flipped cup: retrieval by looks", "",
            f"Mesh cups from the fixed scene camera, crops by detector box and depth ({found['descriptor']}"
            + (f", visual threshold {threshold}" if threshold is not None else "") + "): one entry taught on an upright cup, "
            "one on a flipped cup of another colour; each query cup has the other pose's colour. Right: the first entry "
            f"retrieved is the query's pose. {found['hits']} of {found['queries']} over {found['trials']} trial(s): accuracy "
            f"{_cell(found['accuracy'], found['accuracy_se'])} with looks, "
            f"{_cell(found['no_visual_accuracy'], found['no_visual_accuracy_se'])} by words only.", "",
            "It proves: whether the descriptor and the threshold bring back the knowledge of the cup's pose rather than of its "
            "colour (by words alone the two entries tie: right for one pose only); a miss is an entry of the other pose first, "
            "or none above the threshold.", ""]


LEVELS = ("all", "skill", "plan")
PUBLISHED = ("DROC's paper (Zha et al., 2023, Fig. 2) reports, on a real robot arm: in the first round DROC needed "
             "about half as many corrections as Code as Policies, and after two rounds of teaching it needed few or "
             "none; CaP, which keeps nothing, is corrected again in every round.")


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Corrections per iteration: per trial and task the mean over the iteration's variants, then the mean over
    the tasks (all, skill-level, plan-level), per method; then the mean and standard error over the trials
    (``stderr`` None with one trial). With the share of episodes done and per-task means (over the trials)."""
    by_trial: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_trial.setdefault(int(row.get("trial", 0)), []).append(row)
    trials = [_one_trial(by_trial[k]) for k in sorted(by_trial)]
    if not trials:
        return {"iterations": [], "corrections": {}, "stderr": {}, "success": {}, "per_task": {}, "episodes": 0,
                "trials": 0, "published": PUBLISHED}
    methods = list(dict.fromkeys(m for t in trials for m in t["corrections"]))
    iterations = sorted({i for t in trials for i in t["iterations"]})
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    errors: dict[str, dict[str, dict[str, float | None]]] = {}
    for m in methods:
        table[m], errors[m] = {}, {}
        for level in LEVELS:
            cells = {str(i): [v for t in trials if (v := t["corrections"].get(m, {}).get(level, {}).get(str(i))) is not None]
                     for i in iterations}
            table[m][level] = {i: mean_se(vs)[0] for i, vs in cells.items()}
            errors[m][level] = {i: mean_se(vs)[1] for i, vs in cells.items()}
    success = {m: {str(i): mean_se([t["success"][m][str(i)] for t in trials if str(i) in t["success"].get(m, {})])[0]
                   for i in iterations} for m in methods}
    per_task = {m: {task: {i: mean_se([t["per_task"][m][task][i] for t in trials if i in t["per_task"].get(m, {}).get(task, {})])[0]
                           for i in iterations if any(i in t["per_task"].get(m, {}).get(task, {}) for t in trials)}
                    for task in dict.fromkeys(task for t in trials for task in t["per_task"].get(m, {}))} for m in methods}
    return {"iterations": iterations, "corrections": table, "stderr": errors, "success": success, "per_task": per_task,
            "episodes": sum(t["episodes"] for t in trials), "trials": len(trials), "published": PUBLISHED}


# the paper's Table III: corrections on the plan-level TEST tasks (3 trials per task scenario, a real robot)
TABLE_III = {"preference": (0.5, 1.0), "feasibility": (0.67, 1.33), "common_sense": (0.0, 1.5), "scene": (0.5, 1.5)}
PAIR_METHODS = {"droc": "Ours", "ours-r": "Ours-R"}  # the paper's labels of the methods Table III compares


def plan_pairs(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per method and kind of knowledge (a Table II pair's ``type``): the corrections on its train and its test
    task, each the mean ± standard error over the trials (a kind's pairs averaged within a trial)."""
    cells: dict[tuple[str, str, str, int], list[int]] = {}
    for row in rows:
        if row.get("type") and row.get("role") in ("train", "test"):
            key = (str(row["method"]), str(row["type"]), str(row["role"]), int(row.get("trial", 0)))
            cells.setdefault(key, []).append(int(row["corrections"]))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for method, kind, role, _ in cells:
        per_trial = [sum(v) / len(v) for (m, k, r, _), v in sorted(cells.items()) if (m, k, r) == (method, kind, role)]
        mean, se = mean_se(per_trial)
        out.setdefault(method, {}).setdefault(kind, {})[role] = {"mean": mean, "se": se, "trials": len(per_trial)}
    return out


def plan_pair_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's Table III section ([] when no train/test pair ran)."""
    pairs = plan_pairs(rows)
    if not pairs:
        return []
    kinds = [k for k in TABLE_III if any(k in per for per in pairs.values())]
    head = ["method", *(f"{k} test" for k in kinds), *(f"{k} train" for k in kinds)]
    lines = ["## Plan-level knowledge, train -> test (the paper's Tables II and III)", "",
             "Per kind of knowledge a train task and then a test task (config/benchmarks/droc/plan_level.yaml); the cells "
             "are the corrections each needed, mean ± standard error over the trials. Ours-R keeps the plans that worked "
             "and shows the one of the most similar earlier request, distilling nothing.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, per in pairs.items():
        cells = [_cell(per.get(k, {}).get(role, {}).get("mean"), per.get(k, {}).get(role, {}).get("se"))
                 for role in ("test", "train") for k in kinds]
        lines.append("| " + " | ".join([method, *cells]) + " |")
    lines += ["", "The paper's Table III (corrections on the test tasks, real robot, 3 trials per scenario): "
              + "; ".join(f"{k}: Ours {TABLE_III[k][0]}, Ours-R {TABLE_III[k][1]}" for k in kinds)
              + f". Its Ours and Ours-R are this table's {' and '.join(PAIR_METHODS)}, on other tasks: the same measure, "
              "not the same tasks.", "",
              "It proves: whether knowledge distilled from the train task's corrections (a preference, what the robot must do "
              "first, where things of a kind go, the state of a place) comes back for a test task worded otherwise and about "
              "other things, where a saved concrete plan does not carry over; the train column is the same for both (they "
              "share the correction handler).", ""]
    return lines


def mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The mean of ``values`` and its standard error (sample deviation / sqrt(n); None below two values)."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return round(mean, 3), None
    deviation = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return round(mean, 3), round(deviation / math.sqrt(len(values)), 3)


def _one_trial(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One trial's figures: corrections per method, level and iteration, successes and per-task means (the
    train/test pairs of Table II are not iterated tasks: :func:`plan_pairs`)."""
    cells: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    levels: dict[str, str] = {}
    for row in rows:
        if row.get("type"):
            continue
        cells.setdefault((row["method"], row["task"], int(row["iteration"])), []).append(row)
        levels[row["task"]] = row["level"]
    methods = list(dict.fromkeys(m for m, _, _ in cells))
    iterations = sorted({i for _, _, i in cells})
    per_task = {m: {t: {i: sum(r["corrections"] for r in rs) / len(rs)
                        for (mm, tt, i), rs in sorted(cells.items()) if mm == m and tt == t}
                    for t in dict.fromkeys(t for mm, t, _ in cells if mm == m)} for m in methods}
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    success: dict[str, dict[str, float]] = {}
    for m in methods:
        table[m] = {}
        for level in LEVELS:
            row = {}
            for i in iterations:
                values = [v[i] for t, v in per_task[m].items() if i in v and (level == "all" or levels[t] == level)]
                row[str(i)] = sum(values) / len(values) if values else None
            table[m][level] = row
        success[m] = {str(i): sum(r["success"] for (mm, _, ii), rs in cells.items() if mm == m and ii == i for r in rs)
                      / max(1, sum(len(rs) for (mm, _, ii), rs in cells.items() if mm == m and ii == i)) for i in iterations}
    return {"iterations": iterations, "corrections": table, "success": success, "per_task": per_task,
            "episodes": sum(len(rs) for rs in cells.values())}


def format_table(summary: Mapping[str, Any]) -> str:
    """The corrections-per-iteration table (markdown): a column per level and iteration, mean ± standard error."""
    its = summary["iterations"]
    errors = summary.get("stderr", {})
    head = ["method", *(f"{level} {i}" for level in LEVELS for i in its), *(f"done {i}" for i in its)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, levels in summary["corrections"].items():
        cells = [_cell(levels[level][str(i)], errors.get(method, {}).get(level, {}).get(str(i))) for level in LEVELS for i in its]
        done = [f"{summary['success'][method][str(i)]:.0%}" for i in its]
        lines.append("| " + " | ".join([method, *cells, *done]) + " |")
    return "\n".join(lines)


def _cell(value: float | None, error: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if error is None else f"{value:.2f} ± {error:.2f}"


def role_means(rows: Iterable[Mapping[str, Any]], method: str, roles: Sequence[str] = (), iterations: Sequence[int] = ()
               ) -> dict[int, float]:
    """Per trial, ``method``'s mean corrections over its episodes of ``roles`` (all when empty) in ``iterations`` (all when empty);
    the Table II train/test pairs are not iterated tasks and do not count (:func:`plan_pairs`)."""
    cells: dict[int, list[int]] = {}
    for row in rows:
        if row.get("type"):
            continue
        if row["method"] == method and (not roles or row.get("role") in roles) and (not iterations or int(row["iteration"]) in iterations):
            cells.setdefault(int(row.get("trial", 0)), []).append(int(row["corrections"]))
    return {k: sum(v) / len(v) for k, v in cells.items()}


def compare(rows: Sequence[Mapping[str, Any]], a: str, b: str, roles: Sequence[str] = (), iterations: Sequence[int] = ()) -> str:
    """'a x ± se, b y ± se, b - a d ± se over n trials' for the episodes of ``roles`` in ``iterations`` ('' when one is missing)."""
    one, two = role_means(rows, a, roles, iterations), role_means(rows, b, roles, iterations)
    paired = sorted(one.keys() & two.keys())
    if not paired:
        return ""
    (ma, sa), (mb, sb) = mean_se([one[k] for k in paired]), mean_se([two[k] for k in paired])
    md, sd = mean_se([two[k] - one[k] for k in paired])
    return f"{a} {_cell(ma, sa)}, {b} {_cell(mb, sb)}, difference ({b} - {a}) {_cell(md, sd)} over {len(paired)} trial(s)"


# the figures of the report and what each proves (with the doubles: the mechanics under imperfect reading)
FIGURES = (
    ("DROC against CaP, iterations 2 and 3 (every variant)", "droc", "cap", (), (2, 3),
     "that what the handler and the extractor distil from corrections comes back for the same and similar objects later "
     "(fewer corrections), where CaP, which keeps nothing, must be corrected again."),
    ("DROC against CaP, iteration 1 (nothing learned yet)", "droc", "cap", (), (1,),
     "how much the correction handler alone saves within an episode (a re-run from the person's words against the model "
     "rewriting its call itself), before any knowledge exists."),
    ("DROC against no prior knowledge, iterations 2 and 3", "droc", "droc-no-prior", (), (2, 3),
     "that the later gain comes from the stored knowledge, not from easier variants: the same episodes with the store "
     "emptied before each need the corrections again."),
    ("DROC against retrieval without images, similar objects", "droc", "droc-no-visual", ("similar",), (),
     "that the object's looks retrieve knowledge for a lookalike the text does not tie to the taught one (only where the "
     "names differ; a lookalike sharing the taught object's name is found by text alone)."),
    ("DROC against every entry applied, dissimilar objects", "droc", "droc-retrieve-all", ("dissimilar",), (),
     "that the retrieval's selection keeps knowledge away from an object that looks different and does not want it."),
    ("DROC against the whole history (Ours-E)", "droc", "droc-full-history", (), (),
     "what the handler's history selection buys: with the doubles only through the extra calls a whole history lists to be "
     "mistaken for the one corrected (with noise 0 the two are equal by construction); a model may differ more."),
    ("DROC against its rules ablation of skill knowledge (droc-rule-skills)", "droc", "droc-rule-skills", (), (),
     "what reading skill knowledge with the extractor's skill prompt costs or buys against storing the re-run calls' values "
     "by rule: with the doubles only the skill prompt's missed corrections (equal at noise 0); a model may misread or add more."),
)


def figure_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per figure of ``FIGURES`` that the results hold: the numbers, then what it proves."""
    lines = []
    for title, a, b, roles, iterations, proves in FIGURES:
        numbers = compare(rows, a, b, roles, iterations)
        if numbers:
            lines.append(f"- **{title}**: {numbers}. It proves {proves}")
    return lines


def unread_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The extractor's answers that could not be used, per method and prompt (counted, never replaced)."""
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        for unread in row.get("extractor_unread") or ():
            per = counts.setdefault(str(row.get("method", "?")), {})
            per[str(unread.get("prompt", "?"))] = per.get(str(unread.get("prompt", "?")), 0) + 1
    answers = sum(len(row.get("extractor") or ()) for row in rows)
    if not counts:
        return [f"Extractor answers that could not be used: none of {answers}.", ""]
    listed = "; ".join(f"{m}: " + ", ".join(f"{n} {p} prompt" for p, n in sorted(per.items())) for m, per in sorted(counts.items()))
    return [f"Extractor answers that could not be used (no entry stored for them, nothing in their place), of {answers}: "
            f"{listed} (`extractor_unread` in results.jsonl).", ""]


def write_summary(out: Path, extra: Sequence[str] = ()) -> tuple[Path, str]:
    """summary.json and report.md of ``out`` (``extra``: more report lines, e.g. the looks' accuracy); returns
    report.md's path and the table."""
    rows = read_results(out)
    summary = summarise(rows)
    looks = read_looks(out)
    if looks:
        summary["upright_flipped"] = looks_summary(looks)
        extra = [*looks_lines(looks, _visual_threshold()), *extra]
    summary["plan_pairs"] = plan_pairs(rows)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = format_table(summary)
    settings = json.loads((out / SETTINGS).read_text()) if (out / SETTINGS).is_file() else {}
    tasks = "\n".join(f"| {m} | {t} | " + " | ".join(_cell(v.get(i)) for i in summary["iterations"]) + " |"
                      for m, per in summary["per_task"].items() for t, v in per.items())
    lines = ["# DROC evaluation: corrections per iteration", "",
             f"Models: {settings.get('models', '?')}; reading noise {settings.get('noise', 0.0)}; at most "
             f"{settings.get('max_corrections', '?')} corrections per episode; {summary['trials']} trial(s), "
             f"{summary['episodes']} episodes. Per trial and task the mean over the iteration's variants, then the mean over "
             "tasks (all, skill-level, plan-level tasks), then mean ± standard error over the trials; 'done': the share of "
             "episodes that ended with the task done.", "", *deviation_lines(settings),
             table, "", "It proves: the corrections a method needs per iteration, so whether they fall as it is taught "
             "(a method that learns) or stay (one that does not), under the same reading noise for every method.", "",
             "## What each comparison proves", "", *figure_lines(rows), "", *unread_lines(rows),
             *plan_pair_lines(rows),
             "## Per task (mean over trials)", "", "| method | task | " + " | ".join(f"iter {i}" for i in summary["iterations"]) + " |",
             "|---|---|" + "---|" * len(summary["iterations"]), tasks, "", *extra, "## Published shape", "", PUBLISHED, ""]
    if settings.get("models") == "doubles":
        lines += ["With `--models doubles` these figures prove the mechanics (handler, extraction, retrieval, the "
                  "person from the ground truth) under the doubles' seeded misreadings, not any model's quality: see "
                  "teachbot.evaluation.droc_doubles.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path, table


def deviation_lines(settings: Mapping[str, Any]) -> list[str]:
    """The report's note of every option that deviates from the paper's protocol and was on ([] when none)."""
    on = []
    if settings.get("retrieval", "paper") != "paper":
        on.append(f"retrieval order `{settings['retrieval']}` (the paper's is `paper`: always-scoped entries, the LLM's "
                  "choice of same-category tasks, the single best visual match)")
    if settings.get("inject"):
        on.append("`--inject-learned`: learned skill parameters applied silently by the console (the paper shows them to "
                  "the model, which writes them)")
    if not settings.get("shared_store", True):
        on.append("`--store per-task`: the knowledge store emptied when each task's sequence starts")
    return ["Deviations from the paper's protocol that were on: " + "; ".join(on) + ".", ""] if on else \
        ["The paper's protocol throughout: retrieval in its order, learned knowledge shown to the model, one store.", ""]


def _visual_threshold() -> float | None:
    """config/knowledge.yaml's visual threshold (None when it cannot be read)."""
    try:
        from teachbot.knowledge import KnowledgeConfig  # deferred: the report reads files; the knowledge package only here

        return KnowledgeConfig.load().visual_threshold
    except Exception:  # noqa: BLE001 - the report goes on without it
        return None
