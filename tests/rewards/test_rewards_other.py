"""exact, choice, numeric, format, code, judge, majority rewards; the registry and weighted combinations."""

from __future__ import annotations

import pickle
import threading

import pytest

from tfgrpo.core.answers import majority_vote, vote_key
from tfgrpo.rewards import (
    REWARD_NAMES,
    ChoiceReward,
    CodeReward,
    ExactMatchReward,
    FormatReward,
    JudgeReward,
    MajorityReward,
    NumericReward,
    RewardError,
    combine,
    get_reward,
)


# ---- exact -------------------------------------------------------------------------------------------
def test_exact_match_normalises_case_articles_and_punctuation():
    reward = ExactMatchReward()
    completions = ["Answer: The Eiffel Tower.", "answer: eiffel tower", "\\boxed{\\text{Paris}}", "Berlin"]
    assert reward(completions=completions, answer=["Eiffel Tower", "Eiffel tower", "paris", "Paris"]) == [
        1.0,
        1.0,
        1.0,
        0.0,
    ]


def test_exact_match_accepts_a_list_of_references_and_reports_missing_gold():
    reward = ExactMatchReward()
    assert reward(completions=["Answer: NYC", "Answer: LA"], answer=[["New York", "NYC"], [None]]) == [1.0, None]


# ---- choice ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("The answer is (B).", "B", 1.0),
        ("I think B) is right. Answer: C", "C", 1.0),
        ("\\boxed{D}", "D", 1.0),
        ("\\boxed{D}", "A", 0.0),
        ("**Answer:** (a)", "A", 1.0),
        ("Between A and B, I choose option C", "C", 1.0),
        ("I am not sure.", "A", 0.0),
    ],
)
def test_choice_letters(completion, gold, expected):
    assert ChoiceReward()(completions=[completion], answer=[gold]) == [expected]


def test_choice_by_option_text_and_index():
    reward = ChoiceReward()
    choices = [["red", "green", "blue"]] * 3
    values = reward(
        completions=["Answer: green", "\\boxed{C}", "Answer: A"], answer=["green", 2, "red"], choices=choices
    )
    assert values == [1.0, 1.0, 1.0]
    assert reward(completions=["Answer: green"], answer=["purple"], choices=[["red", "green"]]) == [None]


# ---- numeric -----------------------------------------------------------------------------------------
def test_numeric_is_exact_by_default_and_tolerance_is_explicit():
    exact = NumericReward()
    assert exact(
        completions=["\\boxed{0.5}", "\\boxed{99}", "Answer: 1,000", "\\boxed{25\\%}"],
        answer=["1/2", "100", "1000", "25"],
    ) == [1.0, 0.0, 1.0, 1.0]
    loose = NumericReward(rel_tol=0.01)
    assert loose(completions=["\\boxed{99}", "\\boxed{98}"], answer=["100", "100"]) == [1.0, 0.0]
    absolute = NumericReward(abs_tol=0.05)
    assert absolute(completions=["\\boxed{3.14}"], answer=["3.1416"]) == [1.0]


def test_numeric_unscorable_and_errors():
    reward = NumericReward()
    assert reward(completions=["\\boxed{x}", "\\boxed{4}"], answer=["4", "four"]) == [0.0, None]
    with pytest.raises(RewardError, match="abs_tol must be >= 0"):
        NumericReward(abs_tol=-1)


# ---- format ------------------------------------------------------------------------------------------
def test_format_think_and_boxed():
    reward = FormatReward()
    completions = [
        "<think>add them</think> so \\boxed{4}",
        "<think></think> \\boxed{4}",
        "\\boxed{4}",
        "<think>add them</think> four",
        "<think>x \\boxed{4}</think> four",
    ]
    assert reward(completions=completions) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_format_regex():
    reward = FormatReward(r"^<answer>\d+</answer>$", fullmatch=True)
    assert reward(completions=["<answer>12</answer>", "<answer>x</answer>", " <answer>7</answer>\n"]) == [
        1.0,
        0.0,
        1.0,
    ]
    with pytest.raises(RewardError, match="invalid regex"):
        FormatReward("([")


# ---- code --------------------------------------------------------------------------------------------
TESTS = ["assert add(1, 2) == 3", "assert add(5, 5) == 10"]


@pytest.mark.timeout(60)
def test_code_reward_runs_tests_in_a_limited_subprocess():
    reward = CodeReward(timeout_s=2.0, memory_mb=256)
    completions = [
        "Here:\n```python\ndef add(a, b):\n    return a + b\n```",
        "def add(a, b):\n    return a - b",
        "def add(a, b):\n    return a + b if a < 5 else 0",
        "while True:\n    pass",
        "x = bytearray(1024 * 1024 * 1024)",
        "import os\nos._exit(3)",
        "no code at all (",
    ]
    scores = reward.score(completions, tests=[TESTS] * len(completions))
    assert [s.value for s in scores] == [1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0]
    assert "timed out" in scores[3].reason
    assert "MemoryError" in scores[4].reason
    assert CodeReward(all_or_nothing=True)(completions=[completions[2]], tests=[TESTS]) == [0.0]
    assert reward(completions=[completions[0]], tests=[[]]) == [None]


# ---- judge -------------------------------------------------------------------------------------------
def test_judge_reward_uses_the_callable_and_parses_verdicts():
    seen = []
    lock = threading.Lock()

    def complete(messages):
        with lock:
            seen.append(messages)
        text = messages[-1]["content"]
        if "Response:\nParis" in text:
            return "It names the capital.\nVERDICT: CORRECT"
        if "Response:\nLyon" in text:
            return "Wrong city.\nVERDICT: INCORRECT"
        return "I cannot decide."

    reward = get_reward("judge", complete=complete)
    values = reward(
        prompts=[[{"role": "user", "content": "Capital of France?"}]] * 3,
        completions=["Paris", "Lyon", "Nice"],
        answer=["Paris"] * 3,
    )
    assert values == [1.0, 0.0, None]
    assert len(seen) == 4  # the reply without a verdict was asked once more, with the parser's feedback
    firsts = [m for m in seen if len(m) == 2]
    assert len(firsts) == 3 and all(
        "Capital of France?" in m[-1]["content"] and "Reference answer:\nParis" in m[-1]["content"] for m in firsts
    )
    assert reward.reply_counts == {"replies": 3, "enforced": 0, "parsed": 0, "repaired": 2, "retried": 1, "lost": 1}


def test_judge_errors_propagate_never_become_zero():
    def broken(messages):
        raise ConnectionError("judge server down")

    with pytest.raises(ConnectionError):
        JudgeReward(broken)(completions=["x"], answer=["y"])
    with pytest.raises(RewardError, match="callable"):
        JudgeReward("not callable")  # type: ignore[arg-type]


def test_judge_honours_user_templates_and_reports_bad_ones(tmp_path):
    user = tmp_path / "judge.jinja"
    user.write_text("Q={{ question }} | gold={{ reference }} | got={{ response }}", encoding="utf-8")
    system = tmp_path / "system.jinja"
    system.write_text("You grade chemistry answers.\n", encoding="utf-8")
    seen = []

    def complete(messages):
        seen.append(messages)
        return "VERDICT: CORRECT"

    reward = get_reward("judge", complete=complete, template=str(user), system_template=system)
    assert reward(completions=["H2O"], answer=["water"], problem=["What is water?"]) == [1.0]
    assert seen == [
        [
            {"role": "system", "content": "You grade chemistry answers."},
            {"role": "user", "content": "Q=What is water? | gold=water | got=H2O"},
        ]
    ]
    default = JudgeReward(complete).messages("q", "r", "s")
    assert default[0] == {"role": "system", "content": "You are a careful, strict grader."}

    with pytest.raises(RewardError, match="judge template not found: .*missing.jinja"):
        JudgeReward(complete, template=tmp_path / "missing.jinja")
    broken = tmp_path / "broken.jinja"
    broken.write_text("ok\n{% if question %}unclosed", encoding="utf-8")
    with pytest.raises(RewardError, match=r"bad judge template .*broken.jinja \(line 2\)"):
        JudgeReward(complete, template=broken)
    with pytest.raises(RewardError, match="takes no variables"):
        JudgeReward(complete, system_template=user)


# ---- majority ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["5", "5", "6"], "5"),
        (["073", "73", "8"], "073"),  # canonical forms vote together; the first spelling is returned
        (["1/2", "0.5", "\\frac{1}{2}", "3"], "1/2"),
        (["5", "6"], None),  # tie -> no pseudo-gold
        (["5", "6", "6", "5"], None),
        ([None, None, ""], None),  # nothing parsable
        ([None, None, "4"], "4"),  # unparsable answers never win, never vote
        ([], None),
    ],
)
def test_majority_vote_rules(answers, expected):
    vote = majority_vote(answers, ties="none")  # the majority reward's default
    assert (vote and vote.first) == expected


def test_majority_vote_options():
    assert majority_vote(["5", "6"], ties="first").first == "5"
    assert majority_vote(["5", None, None, None], min_share=0.5) is None
    assert majority_vote(["5", "5", None, None], min_share=0.5).first == "5"
    assert vote_key("\\$1,000") == vote_key("1000")
    with pytest.raises(RewardError, match="ties"):
        MajorityReward(ties="random")  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_majority_reward_scores_each_group_against_its_own_pseudo_gold():
    reward = MajorityReward()
    completions = [
        "\\boxed{4}",
        "\\boxed{4.0}",
        "\\boxed{5}",
        "nothing",  # group a: pseudo-gold 4
        "\\boxed{1}",
        "\\boxed{2}",
    ]  # group b: tie -> None
    values = reward(completions=completions, query_id=["a", "a", "a", "a", "b", "b"])
    assert values == [1.0, 1.0, 0.0, 0.0, None, None]
    # TRL layout: no group column, each prompt repeated for its G generations
    by_prompt = reward(
        prompts=["p", "p", "p", "q", "q", "q"],
        completions=["\\boxed{x^2}", "$x^2$", "\\boxed{2x}"] + ["\\boxed{7}"] * 3,
    )
    assert by_prompt == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    fixed = MajorityReward(group_size=2)(completions=["\\boxed{1}", "\\boxed{1}", "\\boxed{2}", "\\boxed{2}"])
    assert fixed == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(RewardError, match="groups of 4"):
        MajorityReward(group_size=4)(completions=["a"] * 6)


# ---- registry and combine ----------------------------------------------------------------------------
def test_registry_knows_every_name_and_rejects_bad_input():
    for name in REWARD_NAMES:
        params = {"complete": lambda m: "VERDICT: CORRECT"} if name == "judge" else {}
        reward = get_reward(name, **params)
        assert reward.name == name == reward.__name__
    with pytest.raises(RewardError, match="unknown reward 'bogus'.*math"):
        get_reward("bogus")
    with pytest.raises(RewardError, match="numeric.*unexpected keyword"):
        get_reward("numeric", tolerance=0.1)
    for name in ("exact", "numeric", "format", "code", "majority", "choice"):
        assert pickle.loads(pickle.dumps(get_reward(name))).name == name


@pytest.mark.timeout(60)
def test_combine_weights_and_none_handling():
    reward = combine({get_reward("math"): 1.0, "format": 0.5})
    completions = ["<think>ok</think> \\boxed{4}", "\\boxed{4}", "<think>ok</think> \\boxed{5}"]
    assert reward(completions=completions, answer=["4", "4", "4"]) == [1.5, 1.0, 0.5]
    scores = reward.score(["<think>ok</think> \\boxed{4}"], answer=[None])
    assert scores[0].value == 0.5  # math is None there, so only format counts
    assert "math=None" in scores[0].reason and reward.__name__ == "1*math+0.5*format"
    only_none = combine({"math": 1.0})
    assert only_none(completions=["\\boxed{1}"], answer=[None]) == [None]
    with pytest.raises(RewardError):
        combine({})
