"""Prices and context windows come from litellm's bundled table, read a model's entry at a time."""

from __future__ import annotations

import json

from tfgrpo.llm import accounting
from tfgrpo.llm.accounting import context_window, resolve_pricing


def full_table() -> dict:
    return json.loads(accounting._litellm_price_file())


def test_a_models_entry_read_alone_equals_the_parsed_tables():
    data, table = accounting._litellm_price_file(), full_table()
    assert len(table) > 1000  # litellm's table is installed: the reading below is really exercised
    for name in list(table)[::10]:  # every 10th of ~4,900 (all of them agree too: ~6 s)
        assert accounting._litellm_entry(data, name) == table[name], name


def test_a_name_the_table_does_not_know_costs_nothing_and_has_no_window():
    assert resolve_pricing("bench", None, None, local=False).known is False
    assert context_window("bench") is None
    assert accounting._litellm_entry(accounting._litellm_price_file(), "no-such-model-anywhere") is None


def test_a_key_that_is_not_unique_is_read_from_the_whole_table(monkeypatch):
    """Where `"name": {` appears twice (a nested object of that name), the entry is the top-level one."""
    data = json.dumps({"decoy": {"m1": {"input_cost_per_token": 9.0}}, "m1": {"input_cost_per_token": 1.0}}, indent=4)
    monkeypatch.setattr(accounting, "_litellm_price_table", lambda: json.loads(data))  # the table `data` is
    assert accounting._litellm_entry(data.encode(), "m1") == {"input_cost_per_token": 1.0}


def test_known_models_are_priced_from_their_entries():
    table = full_table()
    for name in ("gpt-4o", "deepseek/deepseek-chat"):
        entry = table[name]
        pricing = resolve_pricing(name, None, None, local=False)
        assert pricing.input_per_1m == entry["input_cost_per_token"] * 1_000_000
        assert pricing.output_per_1m == entry["output_cost_per_token"] * 1_000_000
        assert context_window(name) == (entry.get("max_input_tokens") or entry.get("max_tokens"))
