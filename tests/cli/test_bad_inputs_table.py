"""Every bad input of the hardening audit (issue 27), one row each, through the real `tfgrpo` entry point.

A refused row must exit non-zero with exactly one `error:` line (at most one more line: a summary or the
command's banner), no traceback, no request to the model, and nothing written: every file and folder under
the test's folder is the same before and after (no run or output folder, no `*.partial`, no cache, no
`.lock`). A command whose every item was rejected (`library apply` with no operation it can apply) is a
`rejected` row: a non-zero exit, each rejection named, nothing written but the empty lock file every apply
takes. A few inputs are accepted on purpose, as the docs say: those exit 0 and either say a loud
`warning:` or are handled (scored, imported) as they are. Every command is covered: learn, eval, score (each
reward's parameters), library, export/import, compare, finetune, experiment, chat and serve (its refusals
come before it binds a port). The categories are listed in docs/reliability.md ("Bad input"); add a row for
every new one.
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
JSON_DUPLICATE = "d.json:1: duplicate key 'answer'"  # a .json dataset: the line where the key is given again
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

SCORED = '{"completion": "\\\\boxed{3}", "answer": "3"}\n'
CODE_SCORED = '{"completion": "```python\\ndef f():\\n    return 1\\n```", "tests": ["assert f() == 1"]}\n'
PROBLEMS = '{"id": "a", "problem": "What is 1+2?", "answer": "3"}\n'
HISTORY = "lib.history/snapshots/v0000.json"  # the snapshot of version 0 in LIB's history


def samples(*problem_ids: str) -> str:
    """An eval run's samples.jsonl: one sample per problem, the first correct."""
    return "".join(
        json.dumps({"problem_id": pid, "sample_index": 0, "reward": float(i == 0), "correct": i == 0}) + "\n"
        for i, pid in enumerate(problem_ids)
    )


RUN_A = {"a/samples.jsonl": samples("p1", "p2")}  # a good eval run, the baseline of the compare rows
COMPARE = ("compare", "{tmp}/a", "{tmp}/b", "--out", "{tmp}/report")
FINETUNE = ("finetune", "grpo", "--data", "{tmp}/d.jsonl", "--out", "{out}")
CHAT = ("chat", "hi", LLM)
EVAL_EASY = "evals: {easy: {data: easy}}\n"  # the smallest recipe: one eval set
FINETUNE_NO_DATA = "finetunes: {x: {method: sft, data: ./none.jsonl}}"
MODEL_NO_PATH = "model: {backend: transformers, model: ./no-model}"  # a dry run must not ask the hub for it
UPSTREAM = "http://127.0.0.1:9/v1"  # never reached: every serve row is refused before it binds or connects
SERVE = ("serve", "--library", "{tmp}/lib.json", "--upstream", UPSTREAM, "--traces", "{tmp}/t.sqlite")
LEARNER = ("learner", "--traces", "{tmp}/t.sqlite", "--out", "{out}")


@dataclass(frozen=True)
class Row:
    id: str
    args: tuple[str, ...]  # "{tmp}" is the test's folder, "{out}" the run folder no refusal may create
    says: str  # a fragment of the one error line (or of the warning / output of an accepted input)
    files: dict[str, str | bytes] = field(default_factory=dict)  # written under {tmp} first
    outcome: Literal["refused", "rejected", "warned", "handled"] = "refused"


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
    Row("out-under-a-file", (*LEARN[:3], "--out", "{tmp}/f/run", LLM), "f is a file, so nothing can be", {"f": "x"}),
    Row("eval-out-is-a-file", (*EVAL[:3], "--out", "{tmp}/f", LLM), "is a file; give a folder", {"f": "x"}),
    Row("eval-out-under-a-file", (*EVAL[:3], "--out", "{tmp}/f/run", LLM), "f is a file, so nothing", {"f": "x"}),
    Row("resume-nothing", (*LEARN, "--resume"), "nothing to resume"),
    # sysfs refuses every mkdir, root's too: a folder that cannot be written, where chmod cannot stop root
    Row("out-not-writable", (*LEARN[:3], "--out", "/sys/tfgrpo-run", LLM), "/sys/tfgrpo-run: "),  # EPERM or EACCES
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
            ("yaml-recursive-alias", "agent:\n  tool_options: &a {python: *a}\n", "alias *a is inside its own"),
        ]
    ),
    Row("yaml-missing", (*LEARN, "--config", "{tmp}/none.yaml"), "config file not found"),
    Row(
        "data-over-memory-budget",
        ("learn", "--data", "{tmp}/d.jsonl", "--out", "{out}", "--max-dataset-mb", "1", LLM),
        "d.jsonl:128: d.jsonl needs more than its memory budget of 1 MB",
        {"d.jsonl": "".join(json.dumps({"problem": f"What is {i}+1?", "answer": "1"}) + "\n" for i in range(300))},
    ),
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
            ("json-duplicate-key", "d.json", '[{"problem": "p", "answer": "1", "answer": "2"}]', JSON_DUPLICATE),
            (
                "json-object-duplicate-key",
                "d.json",
                '{\n "problem": "p",\n "answer": "1",\n "answer": "2"\n}',
                "d.json:4",
            ),
            (
                "csv-duplicate-column",
                "d.csv",
                "problem,answer,answer\np,1,2\n",
                "d.csv: line 1: column 'answer' twice",
            ),
        ]
    ),
    Row(
        "eval-row-lone-surrogate",
        ("eval", "--data", "{tmp}/d.jsonl", "--out", "{out}", LLM),
        "d.jsonl:1: key 'problem' holds a lone surrogate",
        {"d.jsonl": SURROGATE_ROW},
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
            (
                "library-duplicate-key",
                '{"version": 0,\n"version": 1, "experiences": []}',
                "line 2: duplicate key 'version'",
            ),
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
    # -- tfgrpo score: reward names and parameters (checked when the reward is built, before any row) ---
    *(
        Row(name, ("score", "{tmp}/r.jsonl", *extra), says, {"r.jsonl": rows})
        for name, extra, says, rows in [
            ("score-unknown-reward", ("-r", "nosuch"), "unknown reward 'nosuch'", SCORED),
            ("score-param-unknown-key", ("-p", "bogus=1"), "unexpected keyword argument 'bogus'", SCORED),
            ("score-param-empty-key", ("-p", "=1"), "--param expects KEY=VALUE", SCORED),
            (
                "score-param-bad-yaml",
                ("-p", "rel_tol=[1"),
                "--param 'rel_tol=[1': the value is not valid YAML",
                SCORED,
            ),
            ("score-math-timeout-negative", ("-p", "timeout_s=-1"), "math reward: timeout_s must be > 0", SCORED),
            ("score-math-timeout-text", ("-p", "timeout_s=abc"), "timeout_s must be a finite number > 0", SCORED),
            ("score-math-workers-0", ("-p", "workers=0"), "math reward: workers must be a whole number", SCORED),
            ("score-numeric-negative-tol", ("-r", "numeric", "-p", "rel_tol=-1"), "rel_tol must be >= 0", SCORED),
            ("score-numeric-tol-text", ("-r", "numeric", "-p", "abs_tol=abc"), "abs_tol must be a finite", SCORED),
            ("score-numeric-tol-nan", ("-r", "numeric", "-p", "rel_tol=.nan"), "got nan", SCORED),
            ("score-param-alias-bomb", ("-r", "format", "-p", "pattern=" + ALIAS_BOMB), "YAML aliases", SCORED),
            ("score-param-duplicate-key", ("-p", "timeout_s={{a: 1, a: 2}}"), "duplicate key 'a'", SCORED),
            ("score-format-bad-regex", ("-r", "format", "-p", "pattern=("), "invalid regex '('", SCORED),
            ("score-format-flag-text", ("-r", "format", "-p", "fullmatch=maybe"), "true or false", SCORED),
            ("score-exact-flag-number", ("-r", "exact", "-p", "whole_completion=2"), "true or false, got 2", SCORED),
            ("score-choice-unknown-param", ("-r", "choice", "-p", "letters=ABC"), "argument 'letters'", SCORED),
            (
                "score-code-sandbox-nosuch",
                ("-r", "code", "-p", "sandbox=nosuch"),
                "sandbox must be one of",
                CODE_SCORED,
            ),
            (
                "score-code-timeout-negative",
                ("-r", "code", "-p", "timeout_s=-1"),
                "timeout_s must be > 0",
                CODE_SCORED,
            ),
            ("score-code-memory-0", ("-r", "code", "-p", "memory_mb=0"), "memory_mb must be a whole", CODE_SCORED),
            (
                "score-code-workers-negative",
                ("-r", "code", "-p", "workers=-1"),
                "workers must be a whole",
                CODE_SCORED,
            ),
            ("score-majority-ties-unknown", ("-r", "majority", "-p", "ties=random"), "ties must be one of", SCORED),
            (
                "score-majority-share-2",
                ("-r", "majority", "-p", "min_share=2"),
                "min_share must be a number in",
                SCORED,
            ),
            ("score-majority-group-0", ("-r", "majority", "-p", "group_size=0"), "group_size must be a whole", SCORED),
            ("score-judge-concurrency-0", ("-r", "judge", "-p", "concurrency=0", LLM), "concurrency must be", SCORED),
            ("score-judge-chars-0", ("-r", "judge", "-p", "max_response_chars=0", LLM), "max_response_chars", SCORED),
            ("score-judge-template-missing", ("-r", "judge", "-p", "template=/none.j2", LLM), "not found", SCORED),
        ]
    ),
    # -- tfgrpo score: input rows and files --------------------------------------------------------------
    *(
        Row(name, ("score", "{tmp}/r.jsonl", *extra), says, {"r.jsonl": rows})
        for name, rows, says, extra in [
            ("score-row-not-json", '{"completion": "x",\n', "r.jsonl:1: not valid JSON", ()),
            ("score-row-not-an-object", '["x", "3"]\n', "r.jsonl:1: a row must be a JSON object", ()),
            ("score-row-missing-completion", '{"answer": "3"}\n', "missing key 'completion'", ()),
            ("score-row-missing-answer", '{"completion": "3"}\n', "missing key 'answer'", ()),
            ("score-row-completion-number", '{"completion": 5, "answer": "3"}\n', "must be a string or a list", ()),
            ("score-completion-key-absent", SCORED, "missing key 'nosuch'", ("--completion-key", "nosuch")),
            ("score-binary-file", b"\x00\x01\x02\xff\xfe\x89PNG\r\n\x1a\n", "byte 0xff is not valid UTF-8", ()),
            ("score-empty-file", "", "r.jsonl: no rows to score", ()),
            ("score-out-same-as-input", SCORED, "is the input file", ("--out", "{tmp}/r.jsonl")),
            ("score-out-is-a-folder", SCORED, "is a folder; give a file path", ("--out", "{tmp}")),
        ]
    ),
    Row("score-input-is-a-folder", ("score", "{tmp}"), "input file not found"),
    Row(
        "score-out-under-a-file",
        ("score", "{tmp}/r.jsonl", "-o", "{tmp}/f/o.jsonl"),
        "is a file",
        {"r.jsonl": SCORED, "f": "x"},
    ),
    # -- library files, by every library command --------------------------------------------------------
    *(
        Row(name, ("library", "show", "{tmp}/lib.json"), says, {"lib.json": text})
        for name, text, says in [
            ("library-top-level-list", "[]", "expected a JSON object with 'version' and 'experiences'"),
            ("library-empty-file", "", "not valid JSON at line 1"),
            ("library-binary", b"\x89PNG\r\n\x1a\n\x00\x00", "byte 0x89 is not valid UTF-8"),
            (
                "library-experiences-not-a-list",
                '{"version": 0, "experiences": 5}',
                "experiences: Input should be a valid list",
            ),
            (
                "library-version-text",
                '{"version": "one", "experiences": []}',
                "version: Input should be a valid integer",
            ),
            (
                "library-version-negative",
                '{"version": -1, "experiences": []}',
                "version: Input should be greater than",
            ),
            (
                "library-experience-a-string",
                '{"version": 0, "experiences": ["Add."]}',
                "experiences[0]: Input should be",
            ),
            (
                "library-experience-no-text",
                '{"version": 0, "experiences": [{"id": "G0"}]}',
                "text: required key is missing",
            ),
            (
                "library-text-a-number",
                '{"version": 0, "experiences": [{"id": "G0", "text": 5}]}',
                "text: Input should be",
            ),
            (
                "library-unknown-key",
                '{"version": 0, "experiences": [], "experiencez": []}',
                "unknown key 'experiencez'",
            ),
            (
                "library-duplicate-ids",
                json.dumps({"version": 0, "experiences": [{"id": "G0", "text": "a b"}, {"id": "G0", "text": "c d"}]}),
                "duplicate id 'G0'",
            ),
        ]
    ),
    *(
        Row(name, args, says, files)
        for name, args, says, files in [
            ("library-show-missing", ("library", "show", "{tmp}/none.json"), "library file not found", {}),
            ("library-show-a-folder", ("library", "show", "{tmp}"), "is a folder; give the library's JSON file", {}),
            ("library-history-missing", ("library", "history", "{tmp}/none.json"), "library file not found", {}),
            (
                "library-history-ops-not-json",
                ("library", "history", "{tmp}/lib.json"),
                "ops.jsonl: line 1 is not valid JSON",
                {"lib.json": LIB, HISTORY: LIB, "lib.history/ops.jsonl": "{not json\n{}\n"},
            ),
            (
                "library-diff-missing",
                ("library", "diff", "{tmp}/none.json", "--from", "0"),
                "library file not found",
                {},
            ),
            (
                "library-diff-no-version",
                ("library", "diff", "{tmp}/lib.json", "--from", "7"),
                "no snapshot of version 7",
                {"lib.json": LIB},
            ),
            (
                "library-diff-from-text",
                ("library", "diff", "{tmp}/lib.json", "--from", "abc"),
                "Invalid value for '--from'",
                {"lib.json": LIB},
            ),
            (
                "library-diff-snapshot-not-json",
                ("library", "diff", "{tmp}/lib.json", "--from", "0"),
                "v0000.json: not valid JSON",
                {"lib.json": LIB, HISTORY: "{x"},
            ),
            (
                "library-apply-library-missing",
                ("library", "apply", "{tmp}/none.json", "{tmp}/reply.txt"),
                "library file not found",
                {"reply.txt": REPLY},
            ),
            (
                "library-apply-library-not-json",
                ("library", "apply", "{tmp}/lib.json", "{tmp}/reply.txt"),
                "not valid JSON",
                {"lib.json": "{x", "reply.txt": REPLY},
            ),
            (
                "library-apply-reply-missing",
                ("library", "apply", "{tmp}/lib.json", "{tmp}/none.txt"),
                "reply file not found",
                {"lib.json": LIB},
            ),
            (
                "library-apply-reply-binary",
                ("library", "apply", "{tmp}/lib.json", "{tmp}/reply.txt"),
                "reply.txt: line 1, column 1: byte 0xff",
                {"lib.json": LIB, "reply.txt": b"\xff\xfe\x00\x01"},
            ),
            (
                "library-rollback-missing",
                ("library", "rollback", "{tmp}/none.json", "--to", "0"),
                "library file not found",
                {},
            ),
            (
                "library-rollback-no-history",
                ("library", "rollback", "{tmp}/lib.json", "--to", "0"),
                "no snapshot of version 0",
                {"lib.json": LIB},
            ),
            (
                "library-rollback-no-such-version",
                ("library", "rollback", "{tmp}/lib.json", "--to", "3"),
                "no snapshot of version 3",
                {"lib.json": LIB, HISTORY: LIB},
            ),
        ]
    ),
    *(
        Row(
            name, ("library", "check", "{tmp}/lib.json", "--against", *extra), says, {"lib.json": LIB, "d.jsonl": data}
        )
        for name, extra, data, says in [
            ("check-against-missing", ("{tmp}/none.jsonl",), PROBLEMS, "unknown dataset"),
            ("check-against-unknown", ("no_such_set",), PROBLEMS, "unknown dataset 'no_such_set'"),
            ("check-against-not-json", ("{tmp}/d.jsonl",), "{x\n", "d.jsonl:1: not valid JSON"),
            ("check-ngram-0", ("{tmp}/d.jsonl", "--ngram", "0"), PROBLEMS, "ngram must be at least 3"),
            (
                "check-threshold-2",
                ("{tmp}/d.jsonl", "--copy-threshold", "2"),
                PROBLEMS,
                "copy_threshold must be in (0, 1]",
            ),
        ]
    ),
    Row(
        "check-library-missing", ("library", "check", "{tmp}/none.json", "--against", "easy"), "library file not found"
    ),
    # -- tfgrpo export / import --------------------------------------------------------------------------
    *(
        Row(name, ("export", "{tmp}/lib.json", "--out", *extra), says, {"lib.json": LIB, **files})
        for name, extra, says, files in [
            ("export-unknown-format", ("{tmp}/x.md", "-f", "docx"), "unknown export format 'docx'", {}),
            ("export-unknown-suffix", ("{tmp}/x.docx",), "cannot tell the format", {}),
            ("export-template-missing", ("{tmp}/x.md", "--template", "{tmp}/none.j2"), "template file not found", {}),
            (
                "export-template-syntax",
                ("{tmp}/x.md", "--template", "{tmp}/t.j2"),
                "t.j2 (line 1)",
                {"t.j2": "{% for %}"},
            ),
            (
                "export-template-undefined",
                ("{tmp}/x.md", "--template", "{tmp}/t.j2"),
                "'nosuch' is undefined",
                {"t.j2": "{{ nosuch.x }}"},
            ),
            # a folder without a format is an Agent Skill's place (docs/agents.md); with a file format it is refused
            ("export-out-is-a-folder", ("{tmp}", "-f", "md"), "is a folder; give a file path", {}),
            ("export-out-under-a-file", ("{tmp}/f/x.md",), "is a file, so nothing can be created", {"f": "x"}),
        ]
    ),
    Row("export-library-missing", ("export", "{tmp}/none.json", "--out", "{tmp}/x.md"), "library file not found"),
    Row(
        "export-library-not-json",
        ("export", "{tmp}/lib.json", "--out", "{tmp}/x.md"),
        "not valid JSON",
        {"lib.json": "{x"},
    ),
    *(
        Row(name, ("import", "{tmp}/" + file, "--out", "{tmp}/new.json", *extra), says, {file: text} if text else {})
        for name, file, text, extra, says in [
            ("import-missing-file", "none.md", None, (), "file not found"),
            ("import-unknown-format", "a.md", "- a lesson\n", ("-f", "docx"), "unknown import format 'docx'"),
            ("import-json-not-json", "a.json", "{x", (), "not valid JSON"),
            (
                "import-json-wrong-shape",
                "a.json",
                '{"experiences": 5}',
                (),
                "experiences: Input should be a valid list",
            ),
            ("import-empty-file", "a.txt", "\n", (), "no experiences found"),
            ("import-binary", "a.txt", b"\x89PNG\r\n\x1a\n\xff\x00", (), "byte 0x89 is not valid UTF-8"),
            ("import-yaml-syntax", "a.yaml", "experiences: [1\n", (), "not valid YAML at line 2"),
            ("import-yaml-wrong-shape", "a.yaml", "experiences: 5\n", (), "experiences: Input should be a valid list"),
            (
                "import-lesson-too-long",
                "a.txt",
                "word " * 2_000 + "\n",
                (),
                "lesson 1: text: text is 9,999 characters",
            ),
            ("import-rendered-too-long", "a.txt", "[G0]. " + "word " * 2_000 + "\n", (), "line 1: text: text is"),
        ]
    ),
    Row(
        "import-out-exists",
        ("import", "{tmp}/a.txt", "--out", "{tmp}/lib.json"),
        "pass --force",
        {"a.txt": "A.\n", "lib.json": LIB},
    ),
    Row(
        "import-out-is-a-folder",
        ("import", "{tmp}/a.txt", "--out", "{tmp}", "--force"),
        "is a folder",
        {"a.txt": "A.\n"},
    ),
    # -- tfgrpo compare ----------------------------------------------------------------------------------
    *(
        Row(name, args, says, {**RUN_A, **files})
        for name, args, says, files in [
            ("compare-nothing", ("compare",), "give eval run directories", {}),
            ("compare-without-out", ("compare", "{tmp}/a"), "give eval run directories", {}),
            ("compare-run-missing", COMPARE, "eval run directory not found", {}),
            ("compare-not-an-eval-run", COMPARE, "not an eval run", {"b/x.txt": "x"}),
            ("compare-samples-not-json", COMPARE, "samples.jsonl:1: not valid JSON", {"b/samples.jsonl": "{x\n"}),
            (
                "compare-samples-no-problem-id",
                COMPARE,
                "row 1 has no 'problem_id'",
                {"b/samples.jsonl": '{"reward": 1}\n'},
            ),
            ("compare-samples-empty", COMPARE, "no scored samples among 0 rows", {"b/samples.jsonl": ""}),
            ("compare-samples-binary", COMPARE, "byte 0xff is not valid UTF-8", {"b/samples.jsonl": b"\xff\xfe\x00"}),
            ("compare-metrics-not-json", COMPARE, "metrics.json: not valid JSON", {"b/metrics.json": "{x"}),
            (
                "compare-per-problem-bad",
                COMPARE,
                "per_problem[0] needs keys",
                {"b/metrics.json": '{"per_problem": [{"id": 1}]}'},
            ),
            (
                "compare-disjoint-problems",
                COMPARE,
                "the runs share no problem",
                {"b/samples.jsonl": samples("q1", "q2")},
            ),
            (
                "compare-out-is-a-file",
                ("compare", "{tmp}/a", "--out", "{tmp}/f"),
                "is a file; give a folder",
                {"f": "x"},
            ),
            ("compare-traces-and-runs", ("compare", "{tmp}/a", "--traces", "{tmp}/t.sqlite"), "either eval run", {}),
            ("compare-traces-missing", ("compare", "--traces", "{tmp}/none.sqlite"), "trace store not found", {}),
            (
                "compare-traces-not-sqlite",
                ("compare", "--traces", "{tmp}/t.sqlite"),
                "not a SQLite database",
                {"t.sqlite": "x"},
            ),
            (
                "compare-learn-run-missing",
                (*COMPARE[:2], "--out", "{tmp}/r", "--learn-run", "{tmp}/none"),
                "learn run has no",
                {},
            ),
            (
                "compare-matrix-missing",
                ("compare", "--matrix", "{tmp}/none", "--out", "{tmp}/r"),
                "not an eval matrix",
                {},
            ),
        ]
    ),
    # -- tfgrpo finetune: refused before TRL loads a model, and before --out exists -------------------------
    *(
        Row(name, (*FINETUNE, *extra), says, {"d.jsonl": data})
        for name, extra, data, says in [
            ("finetune-lr-0", ("--lr", "0"), PROBLEMS, "learning_rate must be a number > 0"),
            ("finetune-lr-negative", ("--learning-rate", "-1"), PROBLEMS, "learning_rate must be a number > 0"),
            ("finetune-max-steps-0", ("--max-steps", "0"), PROBLEMS, "max_steps must be a whole number >= 1"),
            ("finetune-max-steps-negative", ("--max-steps", "-1"), PROBLEMS, "max_steps must be a whole number >= 1"),
            ("finetune-batch-size-0", ("--batch-size", "0"), PROBLEMS, "per_device_train_batch_size must be"),
            ("finetune-lora-rank-0", ("--lora-r", "0"), PROBLEMS, "lora_r must be >= 1"),
            ("finetune-lora-alpha-0", ("--lora-alpha", "0"), PROBLEMS, "lora_alpha must be > 0"),
            ("finetune-unknown-peft", ("--peft", "nosuch"), PROBLEMS, "peft='nosuch' is not one of"),
            (
                "finetune-group-size-0",
                ("--group-size", "0"),
                PROBLEMS,
                "num_generations (group size) must be in 1..16",
            ),
            ("finetune-unknown-reward", ("--reward", "nosuch"), PROBLEMS, "reward 'nosuch' is neither a reward"),
            ("finetune-unknown-tool", ("--tools", "nosuch"), PROBLEMS, "unknown tool 'nosuch'"),
            ("finetune-set-no-value", ("--set", "beta"), PROBLEMS, "--set 'beta': expected KEY=VALUE"),
            ("finetune-set-bad-yaml", ("--set", "beta=[1"), PROBLEMS, "the value is not valid YAML"),
            ("finetune-set-alias-bomb", ("--set", "beta=" + ALIAS_BOMB), PROBLEMS, "YAML aliases"),
            ("finetune-set-unknown-key", ("--set", "bogus=1"), PROBLEMS, "unknown option(s) bogus"),
            ("finetune-config-missing", ("--config", "{tmp}/none.yaml"), PROBLEMS, "config file not found"),
            ("finetune-data-not-json", (), "{x\n", "d.jsonl:1: not valid JSON"),
        ]
    ),
    Row(
        "finetune-unknown-method",
        ("finetune", "nosuch", "--data", "easy", "--out", "{out}"),
        "unknown method 'nosuch'",
    ),
    Row("finetune-without-data", ("finetune", "grpo", "--out", "{out}"), "finetune needs --data and --out"),
    Row(
        "finetune-data-missing",
        ("finetune", "grpo", "--data", "{tmp}/none.jsonl", "--out", "{out}"),
        "data file not found",
    ),
    Row(
        "finetune-sft-on-problems",
        ("finetune", "sft", "--data", "{tmp}/d.jsonl", "--out", "{out}"),
        "no completions",
        {"d.jsonl": PROBLEMS},
    ),
    Row(
        "finetune-out-is-a-file",
        ("finetune", "grpo", "--data", "easy", "--out", "{tmp}/f"),
        "is a file; give a folder",
        {"f": "x"},
    ),
    # -- tfgrpo experiment -------------------------------------------------------------------------------
    *(
        Row(name, ("experiment", recipe, "--out", "{out}", *extra), says, files)
        for name, recipe, extra, says, files in [
            ("experiment-unknown-recipe", "nosuch", (), "not a bundled recipe", {}),
            ("experiment-set-no-value", "quickstart", ("--set", "novalue"), "expected KEY.PATH=VALUE", {}),
            ("experiment-set-unknown-key", "quickstart", ("--set", "bogus.x=1"), "unknown key 'bogus'", {}),
            ("experiment-set-bad-yaml", "quickstart", ("--set", "model.model=[1"), "the value is not valid YAML", {}),
            ("experiment-set-alias-bomb", "quickstart", ("--set", "model.model=" + ALIAS_BOMB), "YAML aliases", {}),
            ("experiment-set-wrong-type", "quickstart", ("--set", "evals.easy.samples=abc"), "evals.easy.samples", {}),
            ("experiment-recipe-syntax", "{tmp}/r.yaml", (), "not valid YAML at line 2", {"r.yaml": "learn: [1\n"}),
            ("experiment-recipe-a-list", "{tmp}/r.yaml", (), "the top level must be a mapping", {"r.yaml": "- a\n"}),
            *(
                (name, "{tmp}/r.yaml", ("--dry-run",), says, {"r.yaml": EVAL_EASY + recipe})
                for name, recipe, says in [
                    (
                        "experiment-dry-run-unknown-method",
                        "finetunes: {x: {method: nosuch, data: easy}}",
                        "unknown method 'nosuch'",
                    ),
                    (
                        "experiment-dry-run-finetune-data-missing",
                        FINETUNE_NO_DATA,
                        "finetunes.x.data: unknown dataset",
                    ),
                    ("experiment-dry-run-model-path-missing", MODEL_NO_PATH, "'./no-model' is a path that does not"),
                ]
            ),
            (
                "experiment-recipe-recursive-alias",
                "{tmp}/r.yaml",
                (),
                "inside its own",
                {"r.yaml": "learn: &a [*a]\n"},
            ),
            ("experiment-budget-0", "quickstart", ("--budget-usd", "0"), "--budget-usd must be a number > 0", {}),
            (
                "experiment-budget-negative",
                "quickstart",
                ("--budget-usd", "-1"),
                "--budget-usd must be a number > 0",
                {},
            ),
        ]
    ),
    Row(
        "experiment-out-is-a-file",
        ("experiment", "quickstart", "--out", "{tmp}/f", "--dry-run"),
        "is a file",
        {"f": "x"},
    ),
    # -- tfgrpo chat -------------------------------------------------------------------------------------
    *(
        Row(name, args, says, files)
        for name, args, says, files in [
            ("chat-temperature-negative", (*CHAT, "--temperature", "-1"), "sampling.temperature: Input should be", {}),
            ("chat-top-p-2", (*CHAT, "--top-p", "2"), "sampling.top_p: Input should be less than", {}),
            ("chat-max-tokens-0", (*CHAT, "--max-tokens", "0"), "sampling.max_tokens: Input should be greater", {}),
            ("chat-timeout-0", (*CHAT, "--timeout", "0"), "llm.timeout_s: Input should be greater than 0", {}),
            ("chat-structured-output-bad", (*CHAT, "--structured-output", "maybe"), "llm.structured_output", {}),
            ("chat-missing-prompt", ("chat",), "Missing argument 'prompt'", {}),
            ("chat-config-missing", (*CHAT, "--config", "{tmp}/none.yaml"), "config file not found", {}),
            (
                "chat-config-unknown-key",
                (*CHAT, "--config", "{tmp}/c.yaml"),
                "unknown key 'temprature'",
                {"c.yaml": "temprature: 1\n"},
            ),
            (
                "chat-base-url-credentials",
                ("chat", "hi", "--base-url", "http://u:p@127.0.0.1:9/v1"),
                "may not carry credentials",
                {},
            ),
            (
                "chat-base-url-not-a-url",
                ("chat", "hi", "--backend", "openai", "--base-url", "localhost:9/v1"),
                "not an http(s) URL",
                {},
            ),
            ("chat-adapter-missing", ("chat", "hi", "--adapter", "{tmp}/none"), "adapter directory not found", {}),
        ]
    ),
    # -- tfgrpo serve: refused before it binds a port or opens the trace store -----------------------------
    *(
        Row(name, args, says, {"lib.json": LIB, **files})
        for name, args, says, files in [
            ("serve-nothing", ("serve",), "--library and --upstream are required", {}),
            ("serve-library-missing", (*SERVE[:1], "--library", "{tmp}/none.json", *SERVE[3:]), "none.json", {}),
            ("serve-library-not-json", SERVE, "not valid JSON", {"lib.json": "{x"}),
            ("serve-upstream-not-a-url", (*SERVE[:3], "--upstream", "notaurl"), "neither an http(s) URL nor llm:", {}),
            ("serve-upstream-ftp", (*SERVE[:3], "--upstream", "ftp://h/v1"), "neither an http(s) URL nor llm:", {}),
            (
                "serve-upstream-credentials",
                (*SERVE[:3], "--upstream", "http://u:p@h/v1"),
                "may not carry credentials",
                {},
            ),
            (
                "serve-upstream-unknown-backend",
                (*SERVE[:3], "--upstream", "llm:nosuch"),
                "backend 'nosuch' is not one of",
                {},
            ),
            ("serve-port-negative", (*SERVE, "--port", "-1"), "port: Input should be greater than or equal to 0", {}),
            (
                "serve-port-too-big",
                (*SERVE, "--port", "70000"),
                "port: Input should be less than or equal to 65535",
                {},
            ),
            ("serve-port-text", (*SERVE, "--port", "abc"), "Invalid value for '--port'", {}),
            ("serve-holdout-2", (*SERVE, "--holdout", "2"), "holdout: Input should be less than or equal to 1", {}),
            ("serve-inject-topk-0", (*SERVE, "--inject", "topk:0"), "bad injection 'topk:0'", {}),
            ("serve-timeout-0", (*SERVE, "--timeout-s", "0"), "timeout_s: Input should be greater than 0", {}),
            ("serve-retries-negative", (*SERVE, "--max-retries", "-1"), "max_retries: Input should be greater", {}),
            (
                "serve-reload-interval-0",
                (*SERVE, "--reload-interval-s", "0"),
                "reload_interval_s: Input should be",
                {},
            ),
            ("serve-config-missing", ("serve", "--config", "{tmp}/none.yaml"), "config file not found", {}),
            ("serve-reward-unknown", (*SERVE, "--reward", "nosuch"), "unknown reward 'nosuch'", {}),
            ("serve-traces-under-a-file", (*SERVE[:5], "--traces", "{tmp}/f/t.sqlite"), "is a file, so", {"f": "x"}),
            ("serve-traces-unknown-scheme", (*SERVE[:5], "--traces", "nosuchdb://x"), "use a SQLite file path", {}),
            ("serve-traces-a-folder", (*SERVE[:5], "--traces", "{tmp}"), "is a folder", {}),
            (
                "serve-config-unknown-key",
                ("serve", "--config", "{tmp}/s.yaml"),
                "unknown key 'holdot'",
                {"s.yaml": f"library: lib.json\nupstream: {UPSTREAM}\nholdot: 0.1\n"},
            ),
        ]
    ),
    # -- tfgrpo learner: refused before it opens the trace store's tables or its run directory ----------------
    *(
        Row(name, args, says, files)
        for name, args, says, files in [
            (
                "learner-learn-owned-key",
                (*LEARNER, "--config", "{tmp}/l.yaml"),
                "learn.data: set by the learner",
                {"l.yaml": "learn: {data: easy}\n"},
            ),
            (
                "learner-learn-unknown-key",
                (*LEARNER, "--config", "{tmp}/l.yaml"),
                "unknown key 'group_sise'",
                {"l.yaml": "learn: {group_sise: 3}\n"},
            ),
            ("learner-reward-unknown", (*LEARNER, "--reward", "nosuch"), "unknown reward 'nosuch'", {}),
            (
                "learner-propose-every-0",
                (*LEARNER, "--propose-every", "0"),
                "propose_every: Input should be greater than or equal to 1",
                {},
            ),
            (
                "learner-traces-unreachable",
                ("learner", "--traces", "postgresql+psycopg://u:pw@127.0.0.1:9/db", "--out", "{out}"),
                "cannot open it",
                {},
            ),
        ]
    ),
    # -- every item rejected: exit 1, each named, the library unchanged ------------------------------------
    Row(
        "apply-every-operation-rejected",
        ("library", "apply", "{tmp}/lib.json", "{tmp}/reply.txt"),
        "unknown id 'G7'",
        {"lib.json": LIB, "reply.txt": '[{"option": "delete", "id": "G7"}, {"option": "modify", "id": "G9"}]'},
        outcome="rejected",
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
    Row(
        "import-unknown-suffix-read-as-lines",
        ("import", "{tmp}/lessons.list", "--out", "{tmp}/new.json"),
        "wrote",
        {"lessons.list": "Check the carry.\nRe-read the question.\n"},
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
    """Every file (by content) and folder under `folder`: an empty run folder left behind counts."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in folder.rglob("*")
    }


@pytest.mark.timeout(120)
@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_bad_input(row: Row, tmp_path: Path, capsys, server) -> None:
    for name, content in row.files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    before, requests = _snapshot(tmp_path), len(server.bodies)
    code = run_cli(*_expand(row.args, tmp_path, server.base_url))
    captured = capsys.readouterr()
    err_lines = captured.err.strip().splitlines()
    assert "Traceback" not in captured.err + captured.out
    if row.outcome == "rejected":
        assert code == 1 and row.says in captured.out + captured.err, captured.out + captured.err
        after = _snapshot(tmp_path)
        after.pop("lib.json.lock", None)  # the library's lock file, which every apply takes (it holds nothing)
        assert after == before and len(server.bodies) == requests
        return
    if row.outcome != "refused":
        assert code == 0, captured.err
        assert row.says in captured.out + captured.err
        return
    errors = [line for line in err_lines if line.startswith("error:")]
    assert code != 0 and len(errors) == 1 and len(err_lines) <= 2, captured.err
    assert row.says in errors[0], captured.err
    assert _snapshot(tmp_path) == before  # no run folder, no partial file, no cache, no changed input
    assert len(server.bodies) == requests  # refused before any call to the model
