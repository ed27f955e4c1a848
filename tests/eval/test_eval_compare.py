"""Paired statistics, and `compare` end to end on synthetic eval runs: report files exist and render."""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser

import numpy as np
import pytest
from PIL import Image

from tests.helpers.eval_runs import STRONG, WEAK, synthetic_samples, write_eval_run
from tfgrpo.core.errors import EvalError
from tfgrpo.core.stats import compare_paired, sign_flip_p_value
from tfgrpo.eval.compare import build_comparison, compare_runs, load_eval_run


class TestPairedStats:
    def test_exact_p_value_by_hand(self):
        # d = [1, 1, 1]: of 8 sign assignments only +++ and --- reach |sum| = 3
        assert sign_flip_p_value([0, 0, 0], [1, 1, 1]) == (0.25, "exact (8 sign assignments)")

    def test_identical_systems_give_p_one(self):
        result = compare_paired([0.2, 0.5, 0.9] * 10, [0.2, 0.5, 0.9] * 10)
        assert result.p_value == 1.0 and result.diff == 0.0 and result.ci95 == [0.0, 0.0]
        assert (result.wins, result.losses, result.ties) == (0, 0, 30)

    def test_clearly_better_system_is_detected(self):
        a = np.random.default_rng(1).uniform(0.0, 0.4, size=30)
        b = a + np.random.default_rng(2).uniform(0.2, 0.5, size=30)
        result = compare_paired(a, b, n_bootstrap=2000, n_permutations=4000)
        assert result.p_value < 0.001 and result.p_method.startswith("Monte Carlo")
        assert result.ci95[0] > 0.1 and result.diff == pytest.approx(float(np.mean(b - a)))
        assert result.wins == 30
        flipped = compare_paired(b, a, n_bootstrap=2000, n_permutations=4000)
        assert flipped.diff == pytest.approx(-result.diff) and flipped.ci95[1] < -0.1

    def test_noise_is_not_called_significant(self):
        rng = np.random.default_rng(5)
        a, b = rng.uniform(size=12), rng.uniform(size=12)
        b = b - b.mean() + a.mean()  # same mean, different problems win
        assert compare_paired(a, b).p_value > 0.5

    def test_monte_carlo_agrees_with_exact(self):
        rng = np.random.default_rng(3)
        a, b = rng.uniform(size=14), rng.uniform(size=14) + 0.15
        exact, _ = sign_flip_p_value(a, b)
        sampled, method = sign_flip_p_value(a, b, exact_max=0, n_permutations=10_000)  # < 2^14: sampled
        assert method.startswith("Monte Carlo") and sampled == pytest.approx(exact, abs=0.02)

    def test_mismatched_lengths_raise(self):
        with pytest.raises(ValueError):
            compare_paired([0.1, 0.2], [0.1])


class _HTMLCollector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def test_compare_writes_a_report_that_renders(tmp_path):
    base = write_eval_run(tmp_path / "base", synthetic_samples(WEAK, seed=1), label="baseline")
    library = write_eval_run(
        tmp_path / "lib",
        synthetic_samples(STRONG, seed=2),
        label="library",
        provenance={
            "library": "lib.json",
            "learn_run": "runs/learn",
            "learn_cost_usd": 0.18,
            "learn_wall_s": 3000,
            "train_samples": 100,
            "model": "m",
        },
    )
    tuned = write_eval_run(
        tmp_path / "tuned",
        synthetic_samples(WEAK, seed=1),
        label="lora",
        provenance={
            "finetune_method": "sft",
            "finetune_peft": "lora",
            "finetune_wall_s": 7200,
            "finetune_steps": 200,
            "finetune_tokens_processed": 123456,
            "finetune_tokens_in_loss": 65432,
        },
    )
    learn = tmp_path / "learn"
    learn.mkdir()
    steps = [{"step": i, "epoch": 0, "accuracy": 0.2 + 0.1 * i, "library_size": 2 * i} for i in range(4)]
    (learn / "metrics.json").write_text(json.dumps({"steps": steps, "totals": {"cost_usd": 0.18}}), encoding="utf-8")

    comparison, files = compare_runs([base, library, tuned], tmp_path / "report", learn_run=learn, n_bootstrap=1000)

    assert [s.name for s in comparison.systems] == ["baseline", "library", "lora"]
    library_vs_base, tuned_vs_base = comparison.paired
    assert library_vs_base.result.p_value < 0.01 and library_vs_base.result.ci95[0] > 0
    assert tuned_vs_base.result.p_value == 1.0  # identical samples

    for name in ("accuracy", "per_problem", "learning_curve"):
        with Image.open(files[name]) as image:
            image.verify()
            assert image.format == "PNG"

    markdown = files["markdown"].read_text(encoding="utf-8")
    assert "| library | +" in markdown and "better" in markdown and "no significant difference" in markdown
    assert "$0.1800" in markdown and "learn 50.0 min" in markdown and "fine-tune 2.0 h" in markdown
    assert "![Accuracy with 95% CI](accuracy.png)" in markdown
    assert "| lora | sft (lora) | – | – | 200 | 123,456 | 65,432 | – | – | 2.0 h |" in markdown  # what training did

    parser = _HTMLCollector()
    parser.feed(files["html"].read_text(encoding="utf-8"))
    parser.close()
    assert parser.tags.count("table") == 6  # accuracy, paired, cost, per-problem, learn run, fine-tuned training
    assert len(parser.images) == 3
    for src in parser.images:
        assert src.startswith("data:image/png;base64,")
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as image:
            image.verify()
    assert "Paired difference in Mean@K against baseline" in "".join(parser.text)

    saved = json.loads(files["json"].read_text(encoding="utf-8"))
    assert saved["baseline"] == "baseline" and len(saved["per_problem"]) == 30


def test_runs_on_different_problems_use_the_intersection(tmp_path):
    a = write_eval_run(tmp_path / "a", synthetic_samples(WEAK[:10], seed=1))
    b = write_eval_run(tmp_path / "b", synthetic_samples(WEAK[:6], seed=2))
    comparison = build_comparison([load_eval_run(a), load_eval_run(b)], n_bootstrap=500)
    assert comparison.problem_ids == [f"p{i:02d}" for i in range(6)]
    assert "6 problems common to all runs" in comparison.problems_note
    assert all(s.num_problems == 6 for s in comparison.systems)
    assert comparison.systems[0].num_problems_in_run == 10


def test_no_common_problem_is_an_error(tmp_path):
    a = write_eval_run(tmp_path / "a", synthetic_samples(WEAK[:3], prefix="x"))
    b = write_eval_run(tmp_path / "b", synthetic_samples(WEAK[:3], prefix="y"))
    with pytest.raises(EvalError, match="share no problem"):
        compare_runs([a, b], tmp_path / "report")


def test_run_without_metrics_is_summarised_from_samples(tmp_path):
    run = write_eval_run(tmp_path / "only_samples", synthetic_samples(WEAK[:4]), with_metrics=False)
    loaded = load_eval_run(run)
    assert loaded.name == "only_samples" and len(loaded.per_problem) == 4


def test_bad_run_directories(tmp_path):
    with pytest.raises(EvalError, match="not found"):
        load_eval_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvalError, match="not an eval run"):
        load_eval_run(tmp_path / "empty")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "samples.jsonl").write_text(json.dumps(synthetic_samples([0.5], k=1)[0]) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(EvalError, match=r"samples.jsonl:2: not valid JSON"):
        load_eval_run(broken)


def test_learn_run_without_steps_is_an_error(tmp_path):
    run = write_eval_run(tmp_path / "run", synthetic_samples(WEAK[:3]))
    learn = tmp_path / "learn"
    learn.mkdir()
    (learn / "metrics.json").write_text(json.dumps({"steps": []}), encoding="utf-8")
    with pytest.raises(EvalError, match="not a learn run"):
        compare_runs([run], tmp_path / "report", learn_run=learn)


def test_same_folder_names_are_told_apart(tmp_path):
    a = write_eval_run(tmp_path / "one" / "eval", synthetic_samples(WEAK[:3]))
    b = write_eval_run(tmp_path / "two" / "eval", synthetic_samples(WEAK[:3]))
    comparison = build_comparison([load_eval_run(a), load_eval_run(b)], n_bootstrap=200)
    assert [s.name for s in comparison.systems] == ["one/eval", "two/eval"]


def test_cli_prints_the_table_and_errors_are_one_line(tmp_path, capsys):
    from typer.testing import CliRunner

    from tfgrpo.cli.app import app, main

    a = write_eval_run(tmp_path / "a", synthetic_samples(WEAK[:5], seed=1))
    b = write_eval_run(tmp_path / "b", synthetic_samples(STRONG[:5], seed=2))
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--out", str(tmp_path / "report"), "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert "Paired difference" in result.output and (tmp_path / "report" / "report.html").is_file()

    with pytest.raises(SystemExit) as info:
        main(["compare", str(a), str(tmp_path / "nope"), "--out", str(tmp_path / "r2")])
    assert info.value.code == 2
    error = capsys.readouterr().err
    assert "eval run directory not found" in error and "Traceback" not in error
