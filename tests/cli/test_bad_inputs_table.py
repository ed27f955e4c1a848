"""Every bad input of the hardening audit (issue 27), one row each, through the real `tfgrpo` entry point.

A refused row must exit non-zero with exactly one `error:` line (at most one more line: a summary), no
traceback, no request to the model, and nothing written: every file under the test's folder is the same
before and after (no run folder, no `*.partial`, no cache). A few inputs are accepted on purpose, as the
docs say: those exit 0 and either say a loud `warning:` or are handled (scored) as they are.
The categories are listed in docs/security.md ("Bad input"); add a row for every new one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer

# Nine levels of anchors, nine aliases each: 9^9 leaves once expanded (the audit's alias bomb, grown).
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)
BIG = "1" * 5_000  # past Python's 4,300-digit int conversion limit
BIG_INT_ROW = '{"id": "a", "problem": "What is 1+2?", "answer": ' + BIG + "}\n"
SURROGATE_ROW = '{"id": "a", "problem": "What is 1+2? \\ud800", "answer": "3"}\n'
LIB = json.dumps({"version": 0, "experiences": [{"id": "G0", "text": "Check the carry twice."}]})
LIB_NO_VERSION = json.dumps({"experiences": [{"id": "G0", "text": "Check the carry twice."}]})
LIB_HUGE_EXPERIENCE = '{"version": 0, "experiences": [{"id": "G0", "text": "' + "word " * 2_000_000 + '"}]}'  # 10 MB
LESSON = "Check the carry before adding the next column, and write each partial sum down. " * 7
LIB_LARGE = json.dumps({"version": 0, "experiences": [{"id": f"G{i}", "text": LESSON} for i in range(150)]})
REPLY = '[{"option": "add", "experience": "Check the carry twice."}]'
PYTHON_OPTIONS = "agent:\n  tools: [python]\n  tool_options:\n    python:\n      "

LLM = "LLM"  # stands for the options of the scripted OpenAI-compatible server
LEARN = ("learn", "--data", "easy_train", "--out", "{out}", LLM)
EVAL = ("eval", "--data", "easy", "--out", "{out}", LLM)


@dataclass(frozen=True)
class Row:
    id: str
    args: tuple[str, ...]  # "{tmp}" is the test's folder, "{out}" the run folder no refusal may create
    says: str  # a fragment of the one error line (or of the warning / output of an accepted input)
    files: dict[str, str | bytes] = field(default_factory=dict)  # written under {tmp} first
    outcome: Literal["refused", "warned", "handled"] = "refused"


def learn_with(*extra: str, **files: str | bytes) -> tuple[tuple[str, ...], dict[str, str | bytes]]:
    return (*LEARN, *extra), files


ROWS = [
    # -- bad command-line values -------------------------------------------------------------------------
    Row("timeout-inf", (*LEARN, "--timeout", "inf"), "Input should be a finite number"),
    Row("timeout-nan", (*LEARN, "--timeout", "nan"), "Input should be a finite number"),
    Row("group-size-0", (*LEARN, "-G", "0"), "group_size: Input should be greater than or equal to 1"),
    Row("group-size-text", (*LEARN, "-G", "abc"), "Invalid value for '--group-size'"),
    Row("epochs-negative", (*LEARN, "--epochs", "-1"), "epochs: Input should be greater than or equal to 1"),
    Row("unknown-option", (*LEARN, "--bogus"), "No such option: --bogus"),
    Row("unknown-command", ("nosuch",), "No such command 'nosuch'"),
    Row("unknown-tool", (*LEARN, "--tools", "nonexistent_tool"), "unknown tool 'nonexistent_tool'"),
    Row("unknown-backend", (*LEARN, "--backend", "nosuch"), "llm.backend: Input should be"),
    Row("unknown-dataset", ("learn", "--data", "no_such_set", "--out", "{out}", LLM), "unknown dataset"),
    Row("inject-topk-0", (*LEARN, "--inject", "topk:0"), "topk:K' with K >= 1"),
    Row("budget-0", (*LEARN, "--budget-usd", "0"), "budget_usd: Input should be greater than 0"),
    Row("concurrency-0", (*LEARN, "--concurrency", "0"), "concurrency: Input should be greater than or equal"),
    Row("temperature-negative", (*LEARN, "--temperature", "-1"), "temperature: Input should be greater"),
    Row("out-is-a-file", ("learn", "--data", "easy_train", "--out", "{tmp}/f", LLM), "is a file", {"f": "x"}),
    Row("resume-nothing", (*LEARN, "--resume"), "nothing to resume"),
    Row("traces-and-data", (*LEARN, "--from-traces", "{tmp}/t.sqlite"), "--from-traces and --data are exclusive"),
    Row("cache-is-a-folder", (*EVAL, "--cache", "{tmp}"), "is a directory; give the cache a file path"),
    Row("cache-under-a-file", (*EVAL, "--cache", "{tmp}/f/c.sqlite"), "is a file, so the cache", {"f": "x"}),
    Row("dataset-cache-a-file", (*LEARN, "--dataset-cache", "{tmp}/f"), "the dataset cache is a folder", {"f": "x"}),
    Row("eval-samples-0", (*EVAL, "-k", "0"), "samples: Input should be greater than or equal to 1"),
    Row("eval-topk-without-library", (*EVAL, "--inject", "topk:3"), "selects from a library: add --library"),
    Row("eval-library-missing", (*EVAL, "--library", "{tmp}/none.json"), "library file not found"),
    Row("score-bad-param", ("score", "{tmp}/r.jsonl", "-p", "novalue"), "--param expects KEY=VALUE", {"r.jsonl": ""}),
    Row("score-missing-input", ("score", "{tmp}/none.jsonl"), "input file not found"),
    Row("score-missing-argument", ("score",), "Missing argument 'INPUT.jsonl'"),
    # -- bad YAML configs (learn --config) ---------------------------------------------------------------
    *(
        Row(name, (*LEARN, "--config", "{tmp}/c.yaml"), says, {"c.yaml": text})
        for name, text, says in [
            ("yaml-alias-bomb", "agent:\n  tool_options:\n    python:\n      x: 1\n" + ALIAS_BOMB, "YAML aliases"),
            ("yaml-duplicate-key", "epochs: 2\nepochs: 3\n", "duplicate key 'epochs' (first at line 1)"),
            ("yaml-non-utf8", b"epochs: 2\n# caf\xe9\n", "byte 0xe9 is not valid UTF-8"),
            ("yaml-inf-timeout", "llm:\n  timeout_s: .inf\n", "Input should be a finite number"),
            ("yaml-tool-unknown-key", PYTHON_OPTIONS + "timeout: 5\n", "unknown key 'timeout'"),
            ("yaml-tool-negative-timeout", PYTHON_OPTIONS + "timeout_s: -1\n", "timeout_s: Input should be greater"),
            (
                "yaml-options-of-no-tool",
                "agent:\n  tool_options:\n    pyhton: {timeout_s: 5}\n",
                "options for 'pyhton'",
            ),
            ("yaml-unknown-key", "epochz: 3\n", "unknown key 'epochz'"),
            ("yaml-bool-as-number", "group_size: true\n", "'group_size' must be a number, not true"),
            ("yaml-top-level-list", "- epochs\n", "the top level must be a mapping"),
            ("yaml-section-not-mapping", "llm: 5\n", "'llm' must be a mapping"),
            ("yaml-lone-surrogate", 'llm:\n  model: "m\\ud800"\n', "line 2: a lone surrogate escape"),
            ("yaml-syntax", "epochs: [1\n", "not valid YAML"),
            ("yaml-cache-is-a-folder", "llm:\n  cache: /\n", "is a directory; give the cache a file path"),
            ("yaml-max-row-bytes-tiny", "max_row_bytes: 10\n", "max_row_bytes: Input should be greater"),
        ]
    ),
    Row("yaml-missing", (*LEARN, "--config", "{tmp}/none.yaml"), "config file not found"),
    # -- bad dataset rows (learn --data FILE) ------------------------------------------------------------
    *(
        Row(name, ("learn", "--data", "{tmp}/" + file, "--out", "{out}", LLM), says, {file: text})
        for name, file, text, says in [
            ("row-5000-digit-answer", "d.jsonl", BIG_INT_ROW, "d.jsonl:1: a number of 5,000 digits"),
            ("row-lone-surrogate", "d.jsonl", SURROGATE_ROW, "d.jsonl:1: key 'problem' holds a lone surrogate"),
            ("row-duplicate-key", "d.jsonl", '{"problem": "a", "answer": "1", "answer": "2"}\n', "duplicate key"),
            ("row-missing-answer", "d.jsonl", '{"problem": "What is 1+2?"}\n', "d.jsonl:1: missing key 'answer'"),
            ("row-empty-problem", "d.jsonl", '{"problem": " ", "answer": "1"}\n', "must be a non-empty string"),
            ("row-not-an-object", "d.jsonl", '["What is 1+2?", "3"]\n', "expected a JSON object, got list"),
            ("row-not-json", "d.jsonl", '{"problem": "What is 1+2?",\n', "d.jsonl:1: not valid JSON"),
            ("row-nan-answer", "d.jsonl", '{"problem": "What is 1+2?", "answer": NaN}\n', "key 'answer' is nan"),
            ("row-bool-answer", "d.jsonl", '{"problem": "What is 1+2?", "answer": true}\n', "a string or a number"),
            ("row-too-deep", "d.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
            ("row-too-long", "d.jsonl", '{"problem": "' + "x" * 1_100_000 + '"}\n', "longer than the limit"),
            ("row-not-utf8", "d.jsonl", b'{"problem": "caf\xe9", "answer": "1"}\n', "byte 0xe9 is not valid UTF-8"),
            ("row-duplicate-id", "d.jsonl", '{"id": "a", "problem": "p", "answer": "1"}\n' * 2, "duplicate id 'a'"),
            ("data-empty-file", "d.jsonl", "\n", "no rows"),
            ("data-unsupported-type", "d.txt", "What is 1+2?\n", "unsupported file type '.txt'"),
        ]
    ),
    Row(
        "csv-missing-column-cached-in-run",
        ("learn", "--data", "{tmp}/d.csv", "--out", "{out}", "--dataset-cache", "run", LLM),
        "missing key 'answer'",
        {"d.csv": "problem,solution\nWhat is 1+2?,3\n"},
    ),
    Row(
        "score-5000-digit-answer",
        ("score", "{tmp}/r.jsonl"),
        "r.jsonl:1: a number of 5,000 digits",
        {"r.jsonl": '{"completion": "\\\\boxed{1}", "answer": ' + BIG + "}\n"},
    ),
    Row(
        "score-lone-surrogate",
        ("score", "{tmp}/r.jsonl"),
        "key 'completion' holds a lone surrogate",
        {"r.jsonl": '{"completion": "\\ud800", "answer": "1"}\n'},
    ),
    # -- bad library files -------------------------------------------------------------------------------
    *(
        Row(name, ("library", "show", "{tmp}/lib.json"), says, {"lib.json": text})
        for name, text, says in [
            ("library-without-version", LIB_NO_VERSION, "no 'version' key, so not a library file"),
            ("library-10mb-experience", LIB_HUGE_EXPERIENCE, "an experience is at most 4,000"),
            ("library-lone-surrogate", LIB.replace("twice", "\\ud800"), "key 'text' holds a lone surrogate"),
            ("library-duplicate-key", '{"version": 0, "version": 1, "experiences": []}', "duplicate key 'version'"),
            ("library-5000-digit-version", '{"version": ' + BIG + ', "experiences": []}', "5,000 digits"),
            ("library-not-json", "{not json", "not valid JSON at line 1"),
            ("library-future-format", '{"format": "tfgrpo.library/9", "version": 0}', "unsupported library format"),
        ]
    ),
    *(
        Row(
            name,
            ("library", "apply", "{tmp}/lib.json", "{tmp}/reply.txt", *extra),
            says,
            {"lib.json": LIB, "reply.txt": REPLY},
        )
        for name, extra, says in [
            ("apply-max-items-0", ("--max-items", "0"), "--max-items"),
            ("apply-step-negative", ("--step", "-5"), "--step"),
            ("apply-max-words-negative", ("--max-words", "-1"), "--max-words"),
        ]
    ),
    Row(
        "learn-init-library-without-version",
        (*LEARN, "--init-library", "{tmp}/lib.json"),
        "no 'version' key",
        {"lib.json": LIB_NO_VERSION},
    ),
    Row(
        "eval-library-10mb-experience",
        (*EVAL, "--library", "{tmp}/lib.json"),
        "at most 4,000",
        {"lib.json": LIB_HUGE_EXPERIENCE},
    ),
    Row(
        "import-yaml-alias-bomb",
        ("import", "{tmp}/lib.yaml", "--out", "{tmp}/new.json"),
        "YAML aliases",
        {"lib.yaml": "experiences:\n  - x\n" + ALIAS_BOMB},
    ),
    # -- accepted on purpose (documented) ----------------------------------------------------------------
    Row(
        "eval-large-library-warned",
        ("eval", "--data", "{tmp}/d.jsonl", "--out", "{out}", "-k", "1", "--library", "{tmp}/lib.json", LLM),
        "warning: library",
        {"d.jsonl": '{"id": "a", "problem": "What is 1+2?", "answer": "3"}\n', "lib.json": LIB_LARGE},
        outcome="warned",
    ),
    Row(
        "learn-5000-digit-answer-as-text-scored",
        ("learn", "--data", "{tmp}/d.jsonl", "--out", "{out}", "-G", "2", "--epochs", "1", "--dedup", "off", LLM),
        "2 rollouts (0 failed calls, 0 unscored)",
        {"d.jsonl": json.dumps({"id": "a", "problem": "What is 1+2?", "answer": BIG}) + "\n"},
        outcome="handled",
    ),
]


@pytest.fixture(scope="module")
def server():
    with WorldServer(World()) as running:
        yield running


def _expand(args: tuple[str, ...], tmp: Path, base_url: str) -> list[str]:
    llm = ["--backend", "openai", "--model", "world-model", "--base-url", base_url, "--api-key", "k"]
    expanded: list[str] = []
    for arg in args:
        expanded += llm if arg == LLM else [arg.format(tmp=tmp, out=tmp / "run")]
    return expanded


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in folder.rglob("*")
        if p.is_file()
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input(row: Row, tmp_path: Path, capsys, server) -> None:
    for name, content in row.files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before, requests = _snapshot(tmp_path), len(server.bodies)
    code = run_cli(*_expand(row.args, tmp_path, server.base_url))
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err + captured.out
    if row.outcome != "refused":
        assert code == 0, captured.err
        assert row.says in captured.out + captured.err
        return
    errors = [line for line in err_lines if line.startswith("error:")]
    assert code != 0 and len(errors) == 1 and len(err_lines) <= 2, captured.err
    assert row.says in errors[0], captured.err
    assert _snapshot(tmp_path) == before  # no run folder, no partial file, no cache, no changed input
    assert len(server.bodies) == requests  # refused before any call to the model
