"""Leave-one-out ablation in a scripted world where one experience carries the gain and one hurts."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tfgrpo.cli.app import app
from tfgrpo.eval.ablation import ablate, plan_ablation, prune_by_utility
from tfgrpo.eval.runner import EvalConfig
from tfgrpo.experiences import Library
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(180)

KEY, NEUTRAL, BAD = "Carry the tens digit.", "Write neatly.", "Always add one more."
SAMPLES = 4


def responder(request, index):
    """Right on 2 of 4 samples, +1 with the key lesson in the prompt, -1 with the bad one: additive effects."""
    system = next((m.content for m in request.messages if m.role == "system"), "") or ""
    a, b = (int(x) for x in re.search(r"What is (\d+)\+(\d+)", request.messages[-1].content).groups())
    right = 2 + (KEY in system) - (BAD in system)
    return f"\\boxed{{{a + b if index < right else -1}}}"


@pytest.fixture()
def world(tmp_path):
    data = tmp_path / "val.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"v{i}", "problem": f"What is {i}+{i + 3}?", "answer": str(2 * i + 3)}) + "\n"
            for i in range(8)
        )
    )
    library = tmp_path / "lib.json"
    Library.from_texts([NEUTRAL, KEY, BAD]).save(library)  # G0 neutral, G1 key, G2 bad
    return data, library


def scripted(config):
    return build_client(
        config.llm, backends=[ScriptedBackend(responder)], cache_path=Path(config.out) / "cache.sqlite"
    )


def run_ablation(tmp_path, data, library_path, *, max_groups=20, budget_usd=None):
    config = EvalConfig(data=str(data), out=str(tmp_path / "ablation"), samples=SAMPLES)
    library = Library.load(library_path)
    plan = plan_ablation(library, ["x"] * 8, config, max_groups=max_groups)
    return plan, ablate(
        library_path, config, plan, budget_usd=budget_usd, client_for=scripted, console=Console(file=io.StringIO())
    )


def test_leave_one_out_finds_the_key_experience_and_marks_the_harmful_one(tmp_path, world):
    data, library_path = world
    plan, block = run_ablation(tmp_path, data, library_path)
    assert plan.groups == [["G0"], ["G1"], ["G2"]] and plan.calls == 4 * 8 * SAMPLES
    assert block["full_mean_at_k"] == pytest.approx(0.5) and block["complete"]
    u = block["utilities"]
    assert u["G1"]["utility"] == pytest.approx(0.25) and u["G1"]["verdict"] == "helps" and u["G1"]["ci95"][0] > 0
    assert u["G2"]["utility"] == pytest.approx(-0.25) and u["G2"]["verdict"] == "hurts" and u["G2"]["ci95"][1] < 0
    assert u["G0"]["utility"] == pytest.approx(0.0) and u["G0"]["verdict"] == "neutral"

    library = Library.load(library_path)
    library.metadata["ablation"] = block
    pruned = prune_by_utility(library)
    assert [e.text for e in pruned.library] == [NEUTRAL, KEY]


def test_grouped_ablation_for_large_libraries(tmp_path, world):
    data, library_path = world
    plan, block = run_ablation(tmp_path, data, library_path, max_groups=2)
    assert plan.groups == [["G0", "G1"], ["G2"]]
    assert block["grouped"] and block["utilities"]["G0"]["group"] == ["G0", "G1"]
    assert block["utilities"]["G1"]["utility"] == pytest.approx(0.25)


def test_cli_prints_the_cost_first_writes_metadata_and_prunes(tmp_path, world, monkeypatch):
    data, library_path = world
    import tfgrpo.eval.runner

    original = tfgrpo.eval.runner.build_client
    monkeypatch.setattr(
        tfgrpo.eval.runner,
        "build_client",
        lambda config, **kw: original(config, backends=[ScriptedBackend(responder)], **kw),
    )
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "library",
            "ablate",
            str(library_path),
            "--data",
            str(data),
            "--samples",
            str(SAMPLES),
            "--backend",
            "openai",
            "--model",
            "gpt-4o-mini",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--max-tokens",
            "64",
            "--budget-usd",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert re.search(
        r"ablation plan: 3 variant\(s\) \+ the full library x 8 problems x 4 samples = 128 samples.*at most \$",
        result.output,
    )
    assert result.output.index("ablation plan") < result.output.index("utility on")
    library = Library.load(library_path)
    assert library.metadata["ablation"]["utilities"]["G2"]["verdict"] == "hurts"
    pruned = runner.invoke(app, ["library", "prune", str(library_path), "--by-utility"])
    assert pruned.exit_code == 0 and "removed 1 (G2)" in pruned.output
    assert [e.id for e in Library.load(library_path)] == ["G0", "G1"]


def test_budget_caps_the_ablation(tmp_path, world):
    data, library_path = world
    config = EvalConfig(
        data=str(data),
        out=str(tmp_path / "ablation"),
        samples=SAMPLES,
        llm={"price_input_per_1m": 1000.0, "price_output_per_1m": 1000.0},
    )
    library = Library.load(library_path)
    plan = plan_ablation(library, ["x"] * 8, config, max_groups=20)
    block = ablate(
        library_path, config, plan, budget_usd=1e-9, client_for=scripted, console=Console(file=io.StringIO())
    )
    assert not block["complete"] and block["utilities"] == {} and block["spent_usd"] > 0
