"""One meaning per concept: answer normalisation, the majority vote and its tie rule, the correctness threshold."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, read_jsonl, write_problems
from tfgrpo.core.answers import (
    CORRECT_THRESHOLD,
    is_correct,
    majority_vote,
    normalize_answer,
    normalize_text,
    vote_key,
)
from tfgrpo.core.metrics import majority_answer, problem_results
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.learn.stages.summarize import outcome_of
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client
from tfgrpo.rewards.majority import MajorityReward

TIE = ["\\boxed{6}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"]  # 2 votes each; 6 is voted first


def test_the_one_tie_rule_first_vote_wins():
    vote = majority_vote(["6", "5", "5.0", "06"])
    assert (vote.key, vote.first, vote.indices) == ("6", "6", (0, 3))
    assert majority_vote(["6", "5"], ties="none") is None
    assert majority_vote([None, " ", None]) is None
    with pytest.raises(ValueError, match="ties"):
        majority_vote(["1"], ties="random")  # type: ignore[arg-type]
    # the majority reward calls the same function; it only defaults to abstaining on a tie
    tie = ["\\boxed{6}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"]
    assert [s.value for s in MajorityReward(ties="first").score(tie)] == [1.0, 0.0, 0.0, 1.0]
    assert [s.value for s in MajorityReward().score(tie)] == [None] * 4


def test_one_voting_class_for_eval_and_rewards():
    assert len({vote_key(a) for a in ("1/2", "0.5", "\\frac{1}{2}", "$\\boxed{\\dfrac{1}{2}}$.", "x = 0.50")}) == 1
    assert vote_key("073") == vote_key("73.0") == vote_key("\\$73") == "73"
    assert vote_key("x^2") == vote_key("$x^2$") != vote_key("2x")


def test_one_text_normaliser_for_libraries_and_free_text_answers():
    from tfgrpo.experiences.model import Experience, Library
    from tfgrpo.rewards.exact import ExactMatchReward

    assert normalize_text("  Ｕse\tTHE  rule ") == normalize_text("use the rule") == "use the rule"
    library = Library(experiences=[Experience(id="G0", text="Check the units before adding.")])
    assert library.find_text("check  the UNITS before adding.") is library.experiences[0]
    scores = ExactMatchReward().score(["\\boxed{Ｐaris}", "\\boxed{the  PARIS.}"], answer=["paris", "paris"])
    assert [s.value for s in scores] == [1.0, 1.0]


def test_correctness_threshold_is_one_rule():
    assert CORRECT_THRESHOLD == 0.5
    assert [is_correct(r) for r in (None, 0.0, 0.49, 0.5, 1.0)] == [False, False, False, True, True]
    assert [outcome_of(r) for r in (None, 0.49, 0.5)] == ["unscored", "wrong", "correct"]


@pytest.mark.timeout(120)
def test_maj_at_k_and_the_ground_truth_free_pseudo_label_agree_on_a_tie(tmp_path):
    world = World()
    plain_reply = world.reply_for

    def tied(messages, index):  # the rollouts of "What is 2+3?" split 2:2 between 6 (first) and 5
        reply = plain_reply(messages, index)
        if isinstance(reply, str) and "\\boxed" in reply and "What is 2+3?" in messages[-1]["content"]:
            return f"Adding gives {TIE[index % 4]}"
        return reply

    world.reply_for = tied
    data = write_problems(tmp_path / "train.jsonl", [(2, 3)])
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        dedup=False,
        group_size=4,
        epochs=1,
        ground_truth=False,
        llm={"max_retries": 0},
    )
    backend = ScriptedBackend(world.respond)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    learn(config, client=client, console=Console(file=io.StringIO()))
    rows = sorted(read_jsonl(Path(config.out) / "rollouts.jsonl"), key=lambda r: r["sample"])
    assert [r["extracted"] for r in rows] == ["6", "5", "5", "6"]
    pseudo_labels = {r["pseudo_label"] for r in rows}

    # eval's maj@k over the same samples, in sample order
    samples = [
        {"problem_id": "p", "sample": r["sample"], "extracted": r["extracted"], "reward": 0.0, "gold": "5"}
        for r in rows
    ]
    maj = problem_results(samples)[0][0]  # (per-problem rows, counters)
    assert majority_answer([r["extracted"] for r in rows])[0] == "6"
    assert pseudo_labels == {"6"} and maj["maj_answer"] == "6"


@pytest.mark.timeout(30)
def test_words_after_a_number_that_are_not_units_fail_at_once():
    """The unit pattern once tried every split of every word ("forty" as "fo" + "rty"): six such words took a
    minute, so a boxed answer of thirty hung scoring. Each unit is now matched whole."""
    words = "5 " + "forty one hundred " * 30 + "!"
    assert normalize_answer(words) == words.strip()
    assert [normalize_answer(a) for a in ["5 km²", "12 cm^2", "3 \\text{ meters}", "4 sq. ft", "2.5 kg"]] == [
        "5",
        "12",
        "3",
        "4",
        "2.5",
    ]
