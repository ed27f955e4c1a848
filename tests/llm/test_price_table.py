"""Prices and context windows come from litellm's bundled table."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

from tfgrpo.llm.accounting import context_window, resolve_pricing


def full_table() -> dict:
    """The bundled file, read here independently of the code under test."""
    folder = Path(find_spec("litellm").submodule_search_locations[0])
    return json.loads((folder / "model_prices_and_context_window_backup.json").read_text())


def test_a_name_the_table_does_not_know_costs_nothing_and_has_no_window():
    assert resolve_pricing("bench", None, None, local=False).known is False
    assert context_window("bench") is None
    assert resolve_pricing("no-such-model-anywhere", None, None, local=False).known is False


def test_known_models_are_priced_from_their_entries():
    table = full_table()
    assert len(table) > 1000  # litellm's table is installed: the lookups below are really exercised
    for name in ("gpt-4o", "deepseek/deepseek-chat"):
        entry = table[name]
        pricing = resolve_pricing(name, None, None, local=False)
        assert pricing.input_per_1m == entry["input_cost_per_token"] * 1_000_000
        assert pricing.output_per_1m == entry["output_cost_per_token"] * 1_000_000
        assert context_window(name) == (entry.get("max_input_tokens") or entry.get("max_tokens"))


def test_a_provider_prefix_the_table_lacks_falls_back_to_the_bare_name():
    table = full_table()
    assert "someprovider/gpt-4o" not in table
    assert resolve_pricing("someprovider/gpt-4o", None, None, local=False) == resolve_pricing(
        "gpt-4o", None, None, local=False
    )
    assert resolve_pricing("gpt-4o", None, None, local=True).cost(1_000_000, 1_000_000) == 0.0  # local: free
