"""Per-role models of `teachbot eval cap` (issue 27, item 3): --improve-model, --function-model, --person-model with
their own endpoints, and what sweep.json records of them (each role's model and endpoint, the prices used)."""

from __future__ import annotations

from teachbot.cli import build_parser
from teachbot.commands.eval import CliModels
from teachbot.commands.llm_args import apply_role_arguments, llm_config, price_table, role_models
from teachbot.evaluation.harness import METHODS
from teachbot.llm.factory import role_settings

SMALL, BIG = "http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"


def parse(*extra: str):
    return build_parser().parse_args(["eval", "cap", "--out", "x", "--llm-model", "gpt-3.5-turbo", "--llm-base-url", SMALL,
                                      *extra])


def test_each_role_gets_its_own_model_and_endpoint():
    args = parse("--improve-model", "gpt-4", "--improve-base-url", BIG, "--improve-api-key-env", "BIG_KEY",
                 "--person-model", "gpt-4o-mini")
    raw = apply_role_arguments(llm_config(args), args)
    improvement = role_settings(raw, "improvement")
    assert (improvement["model"], improvement["base_url"], improvement["api_key_env"]) == ("gpt-4", BIG, "BIG_KEY")
    assert (role_settings(raw, "interaction")["model"], role_settings(raw, "interaction")["base_url"]) == ("gpt-3.5-turbo", SMALL)
    assert role_settings(raw, "function_generation")["model"] == "gpt-3.5-turbo"  # not given: as --llm-model
    person = role_settings(raw, "person")
    assert (person["model"], person["base_url"]) == ("gpt-4o-mini", SMALL)  # its own model on the interaction endpoint
    models = role_models(raw, ("interaction", "function_generation", "improvement", "person"))
    assert models["improvement"] == {"backend": "openai", "model": "gpt-4", "base_url": BIG}
    assert models["person"]["model"] == "gpt-4o-mini"
    prices = price_table(models)
    assert set(prices) == {"gpt-3.5-turbo", "gpt-4", "gpt-4o-mini"}
    assert all(isinstance(p, str) or set(p) == {"input", "cached_input", "output"} for p in prices.values())
    built = CliModels(raw)(METHODS["ours"])  # the models the sweep runs, named by role and model
    assert (built.interaction.name, built.improvement.name, built.person.name) == (
        "interaction:gpt-3.5-turbo", "improvement:gpt-4", "person:gpt-4o-mini")


def test_without_role_flags_every_role_is_the_llm_model_and_the_person_the_interaction_model():
    args = parse()
    raw = apply_role_arguments(llm_config(args), args)
    assert raw == llm_config(args)  # nothing set: the same config
    models = role_models(raw, ("interaction", "improvement", "person"))
    assert {m["model"] for m in models.values()} == {"gpt-3.5-turbo"}
    assert CliModels(raw)(METHODS["ours"]).person.name == "interaction:gpt-3.5-turbo"


def test_estimate_before_spending_anything(tmp_path, capsys):
    """--estimate prints a range per method and a total, says its assumptions, sends nothing (the endpoint here does not
    exist) and leaves the output directory alone."""
    from teachbot.cli import main

    out = tmp_path / "sweep"
    assert main(["eval", "cap", "--estimate", "--methods", "ours,ours-k4,cap", "--splits", "SA-SI", "--runs", "2",
                 "--llm-model", "gpt-4o-mini", "--llm-base-url", "http://127.0.0.1:9/v1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:5]}
    assert set(rows) == {"ours", "ours-k4", "cap", "total"} and rows["ours"][1] == "16"  # 8 seen templates x 2 runs
    assert "Nothing was sent to any endpoint" in text and not out.exists()


def test_estimate_scales_with_runs_prompt_size_and_price():
    from teachbot.evaluation.estimate import estimate
    from teachbot.evaluation.person import PersonConfig
    from teachbot.evaluation.sweep import SweepConfig
    from teachbot.llm.pricing import Price
    from teachbot.nodes.eval_sweep import all_tasks

    tasks, roles = all_tasks(), {"interaction": "m", "improvement": "m"}
    price = {"m": Price(input=1.0, cached_input=0.5, output=4.0)}

    def of(runs, **prices):
        config = SweepConfig(methods=("ours", "ours-k4", "ours-no-learning"), splits=("SA-SI",), runs=runs,
                             person=PersonConfig(remember_share=1.0))
        return {e.method: e for e in estimate(config, tasks, prices.get("table", price), roles)}

    one, two = of(1), of(2)
    assert two["ours"].tokens_in.low == 2 * one["ours"].tokens_in.low and two["ours"].runs == 2 * one["ours"].runs
    assert one["ours-k4"].tokens_in.low < one["ours"].tokens_in.low  # 4 examples in the prompt, not 16
    assert one["ours-no-learning"].calls.high < one["ours"].calls.high  # no improvement chain
    e = one["ours-no-learning"]
    assert e.cost.low == (e.tokens_in.low * 1.0 + e.tokens_out.low * 4.0) / 1e6
    assert of(1, table={"m": None})["ours"].cost.high == 0.0  # an unknown model costs 0 (and the printout says so)
