"""Prices of LLM calls (config/prices.yaml) and the per-role usage meter."""

from __future__ import annotations

import threading

import pytest

from teachbot.errors import ConfigError
from teachbot.llm.base import Completion
from teachbot.llm.pricing import Price, PriceTable, UsageMeter


def completion(model: str = "gpt-4o-mini-2024-07-18", prompt: int = 1000, output: int = 100, cached: int = 0,
               latency: float = 1.0) -> Completion:
    return Completion("x", model, "digest", prompt, output, latency, cached_tokens=cached)


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return PriceTable.load()


def test_the_shipped_table_prices_common_models(table):
    for model in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"):
        price = table.price(model)
        assert price is not None and price.input > 0 and price.output > price.input and price.cached_input <= price.input


def test_longest_prefix_of_the_served_name_wins(table):
    assert table.price("gpt-4o-mini-2024-07-18") == table.price("gpt-4o-mini") != table.price("gpt-4o")
    assert table.price("gpt-4o-2024-08-06") == table.price("gpt-4o")
    assert table.price("o3-mini-2025-01-31") == table.price("o3-mini")
    assert table.price("GPT-5-MINI") == table.price("openai/gpt-5-mini") == table.price("gpt-5-mini")


def test_cached_tokens_at_the_cached_rate():
    table = PriceTable({"m": Price(input=2.0, cached_input=0.5, output=8.0)})
    assert table.cost(completion("m", prompt=1_000_000, output=0)) == pytest.approx(2.0)
    assert table.cost(completion("m", prompt=1_000_000, output=0, cached=600_000)) == pytest.approx(0.4 * 2.0 + 0.6 * 0.5)
    assert table.cost(completion("m", prompt=0, output=1_000_000)) == pytest.approx(8.0)
    assert table.cost(completion("m", prompt=10, output=0, cached=50)) == pytest.approx(10 * 0.5 / 1e6)  # never more cached than sent


def test_unknown_free_and_local_models(table):
    assert not table.known("o9-preview") and table.cost(completion("o9-preview")) == 0.0
    assert table.known("Qwen/Qwen2.5-7B-Instruct") and table.cost(completion("Qwen/Qwen2.5-7B-Instruct")) == 0.0
    assert table.known("interaction:scripted") and table.cost(completion("interaction:scripted")) == 0.0
    assert table.cost(completion("gpt-4o"), local=True) == 0.0 < table.cost(completion("gpt-4o"))


def test_a_table_file_with_a_malformed_entry_is_a_config_error(tmp_path):
    path = tmp_path / "prices.yaml"
    path.write_text("prices:\n  models:\n    m: {input: 1.0}\n")
    with pytest.raises(ConfigError, match="prices.models.m"):
        PriceTable.load(path)
    path.write_text("prices:\n  models:\n    m: {input: -1, output: 2}\n")
    with pytest.raises(ConfigError, match=">= 0"):
        PriceTable.load(path)
    path.write_text("prices:\n  models:\n    m: {input: 1, output: 2}\n")
    assert PriceTable.load(path).price("m-1") == Price(1.0, 1.0, 2.0)  # cached_input omitted: the input price


def test_meter_sums_per_role_and_overall():
    table = PriceTable({"gpt-4o-mini": Price(0.15, 0.075, 0.60), "gpt-4.1": Price(2.0, 0.5, 8.0)})
    meter = UsageMeter(table)
    for _ in range(6):
        meter.add("interaction", completion("gpt-4o-mini-2024-07-18", prompt=5000, output=40, cached=4000, latency=1.2))
    cost = meter.add("improvement", completion("gpt-4.1", prompt=11_000, output=72, latency=2.6))
    assert cost == pytest.approx((11_000 * 2.0 + 72 * 8.0) / 1e6)
    totals = meter.totals()
    assert totals["interaction"]["calls"] == 6 and totals["interaction"]["cached_input_tokens"] == 24_000
    total = totals["total"]
    assert (total["calls"], total["input_tokens"], total["cached_input_tokens"], total["output_tokens"]) == (7, 41_000, 24_000, 312)
    assert total["seconds"] == pytest.approx(9.8) and total["cost_known"]
    assert total["cost"] == pytest.approx(totals["interaction"]["cost"] + totals["improvement"]["cost"])
    line = meter.summary_line()
    assert line == (f"episode: 7 LLM calls, 41.0k input tokens (24.0k cached), 312 output, 9.8 s, ${total['cost']:.4f} "
                    f"(interaction 6 calls ${totals['interaction']['cost']:.4f}, improvement 1 call ${cost:.4f})")
    meter.reset()
    assert meter.totals() == {"total": meter.totals()["total"]} and meter.totals()["total"]["calls"] == 0


def test_summary_names_models_without_a_price():
    meter = UsageMeter(PriceTable({"gpt-4o": Price(2.5, 1.25, 10.0)}))
    meter.add("interaction", completion("o9-preview"))
    assert meter.summary_line().endswith("1.0 s, cost unknown for o9-preview")
    meter.add("improvement", completion("gpt-4o"))
    line = meter.summary_line("step")
    assert line.startswith("step: 2 LLM calls, 2.0k input tokens, 200 output")
    assert "+ cost unknown for o9-preview (interaction 1 call cost unknown, improvement 1 call $0.0035)" in line
    assert meter.totals()["total"]["unknown_models"] == ["o9-preview"] and not meter.totals()["total"]["cost_known"]
    local = UsageMeter(PriceTable())
    local.add("interaction", completion("my-finetune"), local=True)
    assert local.summary_line().endswith("$0.0000")


def test_meter_is_thread_safe():
    meter = UsageMeter(PriceTable({"m": Price(1.0, 1.0, 1.0)}))

    def work() -> None:
        for _ in range(500):
            meter.add("interaction", completion("m", prompt=10, output=1, latency=0.001))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = meter.totals()["total"]
    assert (total["calls"], total["input_tokens"], total["output_tokens"]) == (4000, 40_000, 4000)
    assert total["cost"] == pytest.approx(44_000 / 1e6)
