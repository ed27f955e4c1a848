"""The user-facing entry points on the embedded model: start-up cost, `chat`, and eval → compare."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from tfgrpo.cli.app import app

HEAVY = {
    "torch",
    "transformers",
    "chromadb",
    "litellm",
    "trl",
    "peft",
    "sentence_transformers",
    "math_verify",
    "sympy",
    "openai",
    "scipy",  # 1.4 s: the CLI derives its options from the config classes, so their modules must stay light
    "numpy",
    "matplotlib",
}


def test_cli_start_imports_no_heavy_library():
    """`tfgrpo --help` must stay fast: nothing heavy may be imported at module level of the CLI."""
    code = (
        f"import sys, tfgrpo.cli.app; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    # A config class whose module imports one of these at the top (tfgrpo.eval.runner -> tfgrpo.core.metrics -> scipy)
    # belongs in a light module of its own (e.g. eval/config.py), which the CLI then imports.
    assert out == "[]", f"`import tfgrpo.cli.app` loads {out}"


def test_learn_reaches_its_first_request_with_nothing_heavy_imported():
    """The modules `tfgrpo learn` runs before its first request (the start-up path, docs/performance.md) load
    nothing heavy: the SDK loads when the backend is built, numpy, scipy, the vector store and the math
    verifier after the first request (in the network wait, or on first use)."""
    modules = "tfgrpo.cli.app, tfgrpo.learn.loop, tfgrpo.llm.backends.openai_backend, tfgrpo.rollout.sampling"
    code = f"import sys, {modules}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"the learn path loads {out} before its first request"


def test_every_command_has_help():
    runner = CliRunner()
    for command in ("chat", "learn", "eval", "compare", "score", "library", "export", "import", "finetune"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage" in result.output


@pytest.mark.slow
def test_chat_answers_with_the_embedded_model():
    result = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "chat", "What is the capital of France?", "--max-tokens", "16"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # chat is greedy by default: the same answer every time (a --max-tokens alone must not change that)
    assert result.stdout.strip() == "The capital of France is Paris."
    assert "37 prompt + 8 completion tokens" in result.stderr  # the usage line


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


@pytest.mark.slow
def test_eval_and_compare_on_the_embedded_model(tmp_path):
    """SmolLM2 on three easy problems with and without a hand-written library, then the report."""
    from PIL import Image

    from tfgrpo.experiences import Library

    library = tmp_path / "library.json"
    Library.from_texts(["Add the two numbers, then write only the result in \\boxed{}."]).save(library)
    runner = CliRunner()
    common = ["--data", "easy", "--limit", "3", "--samples", "2", "--max-tokens", "48"]
    for name, extra in (("base", []), ("lib", ["--library", str(library)])):
        result = runner.invoke(app, ["eval", *common, "--out", str(tmp_path / name), *extra])
        assert result.exit_code == 0, result.output
        metrics = json.loads((tmp_path / name / "metrics.json").read_text())
        assert metrics["num_problems"] == 3 and metrics["num_samples"] == 6
        assert 0.0 <= metrics["mean_at_k"] <= 1.0
        assert metrics["provenance"]["backend"] == "transformers"
    rows = [json.loads(line) for line in (tmp_path / "lib" / "samples.jsonl").read_text().splitlines()]
    assert all("[G0]. Add the two numbers" in r["messages"][0]["content"] for r in rows)
    assert all(r["completion"].strip() for r in rows)  # the model really answered

    result = runner.invoke(
        app, ["compare", str(tmp_path / "base"), str(tmp_path / "lib"), "--out", str(tmp_path / "report")]
    )
    assert result.exit_code == 0, result.output
    parser = _Tags()
    parser.feed((tmp_path / "report" / "report.html").read_text())
    assert {"html", "table", "img"} <= set(parser.tags)
    pngs = list((tmp_path / "report").glob("*.png"))
    assert pngs
    for png in pngs:
        with Image.open(png) as image:
            image.verify()
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Mean@K" in report and "baseline" in report and "library" in report
