"""`tfgrpo experiment quickstart-baselines` end to end on the embedded SmolLM2 (llama.cpp learns, transformers
trains the adapters and runs every eval), at the smallest settings that still train: the four rows come from
the runs, each adapter is applied in its eval, a second run skips everything, and a baseline that fails keeps
its row, marked, next to the others'."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tfgrpo.cli.app import app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# The bundled recipe, made small through --set (the baselines' settings included): one learn step on 3
# problems, 1 SFT step (at a high rate), 3 GRPO steps (one group of 4 each, so one with mixed rewards trains), 4 eval problems.
SMALL = [
    "learn.settings.limit=3",
    "learn.settings.rollout_sampling.max_tokens=64",
    "learn.settings.summary_max_tokens=64",
    "finetunes.sft.options.max_steps=1",
    # one step at the recipe's 2e-4 can leave greedy replies unchanged: a rate that makes the adapter's effect
    # visible in every run, so "the adapter is applied" is seen in the eval's replies
    "finetunes.sft.options.learning_rate=0.01",
    "finetunes.sft.options.per_device_train_batch_size=1",
    "finetunes.grpo.options.per_device_train_batch_size=4",
    "finetunes.grpo.options.max_completion_length=48",
    "evals.easy.limit=4",
    "evals.easy.samples=1",
    "eval_defaults.sampling.max_tokens=48",
]
ROWS = ["base", "library seed 42", "sft", "grpo"]


def experiment(out: Path, *extra: str):
    overrides = [arg for item in [*SMALL, *extra] for arg in ("--set", item)]
    return CliRunner().invoke(app, ["experiment", "quickstart-baselines", "--out", str(out), *overrides])


def completions(run: Path) -> list[str]:
    return [json.loads(line)["completion"] for line in (run / "samples.jsonl").read_text().splitlines()]


def mean_at_k_from_samples(run: Path) -> float:
    """Mean@K recomputed from the eval's own samples: per problem the share correct, averaged over problems."""
    rewards = defaultdict(list)
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        rewards[row["problem_id"]].append(float(row["reward"]) >= 1.0)
    return sum(sum(v) / len(v) for v in rewards.values()) / len(rewards)


def tokens_in(cell: str) -> float:
    """A table's token count back as a number ("6.4k" -> 6400, "1.2M" -> 1.2e6, "355" -> 355)."""
    scale = {"k": 1e3, "M": 1e6}.get(cell[-1], 1.0)
    return float(cell.rstrip("kM")) * scale


def test_quickstart_baselines_makes_the_four_rows_applies_the_adapters_skips_on_rerun_and_marks_a_failure(tmp_path):
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    pytest.importorskip("peft", reason="needs the finetune extra (CI installs it)")
    out = tmp_path / "qb"

    first = experiment(out)
    assert first.exit_code == 0, first.output
    assert "time estimate for the steps still to run: ~" in first.output  # the local backends were timed
    table = json.loads((out / "report" / "table.json").read_text())
    assert [row[0] for row in table["rows"]] == ROWS
    assert table["headers"][1:3] == ["easy Mean@1 [95% CI]", "easy Δ vs base (p)"]

    # every number is the runs' own: the eval's metrics, recomputed from its samples; Δ against the base row
    means = {}
    for row, system in zip(table["rows"], ["base", "library-seed-42", "sft", "grpo"], strict=True):
        run = out / "eval" / "easy" / system
        metrics = json.loads((run / "metrics.json").read_text())
        means[system] = metrics["mean_at_k"]
        assert metrics["mean_at_k"] == pytest.approx(mean_at_k_from_samples(run))
        assert row[1].startswith(f"{100 * metrics['mean_at_k']:.1f} [")
        assert metrics["num_problems"] == 4 and metrics["k"] == 1
        if system != "base":
            delta = float(row[2].split(" (p=")[0])
            assert delta == pytest.approx(100 * (means[system] - means["base"]), abs=0.05)
        assert row[-1] != "–" and any(ch.isdigit() for ch in row[-1])  # wall time: training plus evals
    sft_summary = json.loads((out / "finetune" / "sft" / "finetune_summary.json").read_text())
    grpo_summary = json.loads((out / "finetune" / "grpo" / "finetune_summary.json").read_text())
    learn_totals = json.loads((out / "learn" / "seed-42" / "metrics.json").read_text())["totals"]
    # training tokens: the learn run's prompt + completion tokens, each fine-tune's tokens through the model
    learned = learn_totals["prompt_tokens"] + learn_totals["completion_tokens"]
    for row, tokens in zip(
        table["rows"][1:], [learned, sft_summary["tokens_processed"], grpo_summary["tokens_processed"]], strict=True
    ):
        assert tokens > 0 and tokens_in(row[3]) == pytest.approx(tokens, rel=0.05, abs=0.5)
    # each baseline really trained: SFT on >= 1 successful rollout, GRPO with a non-zero advantage in some step
    assert sft_summary["samples"] >= 1 and sft_summary["steps"] == 1 and sft_summary["tokens_in_loss"] > 0
    assert grpo_summary["steps"] == 3 and grpo_summary["rl_batches_nothing_to_learn"] < grpo_summary["rl_batches"]
    assert grpo_summary["tokens_in_loss"] > 0 and grpo_summary["groups"]["total"] == 3

    # the adapters were applied: recorded in each eval's provenance, and with the same engine, prompts and
    # sampling seed as the base eval, their replies differ from the base model's
    base = json.loads((out / "eval" / "easy" / "base" / "metrics.json").read_text())["provenance"]
    assert base["backend"] == "transformers" and base["adapter"] is None
    for name in ("sft", "grpo"):
        provenance = json.loads((out / "eval" / "easy" / name / "metrics.json").read_text())["provenance"]
        assert provenance["backend"] == "transformers"
        assert provenance["adapter"] == str(out / "finetune" / name)
        assert provenance["model"].endswith(f"+lora:{(out / 'finetune' / name).resolve()}")
        assert provenance["finetune_method"] == name
        assert completions(out / "eval" / "easy" / name) != completions(out / "eval" / "easy" / "base")

    # the per-set report: the adapters' training summaries (and the library's experiences, if it learned any)
    per_set = (out / "report" / "easy" / "report.md").read_text()
    assert "Fine-tuned baselines: what the training did" in per_set
    grpo_line = next(line for line in per_set.splitlines() if line.startswith("| grpo | grpo (lora) |"))
    groups = grpo_summary["groups"]
    assert f"| {groups['filtered']} of {groups['total']} |" in grpo_line  # groups filtered (equal rewards)
    assert f"| {grpo_summary['tokens_in_loss']:,} |" in grpo_line and f"| {grpo_summary['steps']} |" in grpo_line
    library = json.loads((out / "learn" / "seed-42" / "library.json").read_text())
    for experience in library["experiences"]:
        assert experience["text"] in per_set
    count = len(library["experiences"])  # the learned library's table, with its size (none when nothing was learned)
    assert (f"## Learned experiences ({count})" in per_set) == (count > 0)
    assert (out / "report" / "system_prompt-seed-42.txt").is_file()
    for name in ("report.md", "report.html", "accuracy.png"):
        assert (out / "report" / name).is_file()

    # the same command again: every step complete with the same settings, nothing timed or run
    again = experiment(out)
    assert again.exit_code == 0, again.output
    record = json.loads((out / "experiment.json").read_text())
    assert set(record["runs"][-1]["actions"].values()) == {"skipped"}
    assert "timing the local backends" not in again.output

    # a baseline that fails (no rollout reaches reward 2, so SFT has no data): its row is marked, the others stay
    failed = experiment(out, "finetunes.sft.options.success_threshold=2")
    assert failed.exit_code == 0, failed.output
    actions = json.loads((out / "experiment.json").read_text())["runs"][-1]["actions"]
    assert actions["finetune/sft"] == actions["eval/easy/sft"] == "failed"
    assert actions["finetune/grpo"] == actions["eval/easy/grpo"] == actions["learn/seed-42"] == "skipped"
    assert actions["report"] == "ran"
    marked = json.loads((out / "report" / "table.json").read_text())
    assert [row[0] for row in marked["rows"]] == ROWS
    sft_row = marked["rows"][2]
    assert sft_row[1].startswith("failed: ") and "no usable sft examples" in sft_row[1]
    for index in (0, 1, 3):
        assert marked["rows"][index][1:3] == table["rows"][index][1:3]  # the others' numbers unchanged
    assert "finetune/sft failed" in failed.output
