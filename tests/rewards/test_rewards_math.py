"""The math reward as a TRL reward function and as a scorer: interface, None semantics, threads, asyncio."""

from __future__ import annotations

import asyncio
import pickle
from concurrent.futures import ThreadPoolExecutor

import pytest

from tfgrpo.rewards import MathReward, RewardError, Score, get_reward
from tfgrpo.rewards.verifier import Verifier

HOSTILE = "\\boxed{9^{9^{9^{9^9}}}}"


@pytest.fixture(scope="module")
def verifier():
    with Verifier(timeout_s=1.0) as pool:
        yield pool


@pytest.fixture()
def reward(verifier):
    return MathReward(verifier=verifier)


def test_trl_signature_and_conversational_completions(reward):
    completions = [
        [{"role": "assistant", "content": "so \\boxed{073}"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "Answer: 12"}]}],
        "plain text \\boxed{5}",
    ]
    values = reward(
        prompts=["p1", "p2", "p3"],
        completions=completions,
        answer=["73", "13", "5"],
        completion_ids=[[1], [2], [3]],
        trainer_state=object(),
        log_extra=print,
        log_metric=print,
    )
    assert values == [1.0, 0.0, 1.0]
    assert reward.__name__ == "math" and reward.name == "math"


def test_score_carries_extracted_answer_and_reason(reward):
    scores = reward.score(["\\boxed{3} then \\boxed{4}", "no digits", "Answer: 5"], answer=["4", "1", "500"])
    assert all(isinstance(s, Score) for s in scores)
    assert scores[0] == Score(1.0, "4", scores[0].reason) and "correct" in scores[0].reason
    assert scores[1].value == 0.0 and scores[1].extracted is None and "no final answer" in scores[1].reason
    assert scores[2].value == 0.0 and scores[2].extracted == "5" and "500" in scores[2].reason


def test_missing_gold_is_none_not_zero(reward):
    values = reward(completions=["\\boxed{1}", "\\boxed{2}"], answer=[None, "  "])
    assert values == [None, None]


def test_unparsable_gold_is_none(reward):
    (score,) = reward.score(["\\boxed{5}"], answer=["\\frac{"])
    assert score.value is None and "gold" in score.reason


def test_missing_column_names_the_column(reward):
    with pytest.raises(RewardError, match="'answer'"):
        reward(completions=["\\boxed{1}"], solution=["1"])
    other = MathReward(answer_key="solution", verifier=reward.verifier)
    assert other(completions=["\\boxed{1}"], solution=["1"]) == [1.0]


def test_column_length_mismatch_is_an_error(reward):
    with pytest.raises(RewardError, match="2 values for 1 completions"):
        reward(completions=["\\boxed{1}"], answer=["1", "2"])


def test_several_boxes_are_not_a_set(reward):
    # boxing every guess must not earn reward: only the last box counts
    assert reward(completions=["\\boxed{3}, \\boxed{4}, \\boxed{5}"], answer=["3"]) == [0.0]


def test_timeout_scores_zero_with_a_reason(reward):
    (score,) = reward.score([HOSTILE], answer=["1"])
    assert score.value == 0.0 and "timed out" in score.reason


@pytest.mark.timeout(60)
def test_works_from_threads_concurrently(reward):
    batches = [(["\\boxed{x^2+2x+1}", HOSTILE.replace("9^9", f"9^{k}")], ["(x+1)^2", "1"]) for k in range(2, 6)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda b: reward(completions=b[0], answer=b[1]), batches))
    assert results == [[1.0, 0.0]] * 4


@pytest.mark.timeout(60)
async def test_works_inside_asyncio_without_blocking_the_loop(reward):
    ticks = 0

    async def heartbeat():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    beat = asyncio.create_task(heartbeat())
    results = await asyncio.gather(
        asyncio.to_thread(reward, completions=[HOSTILE.replace("9^9", "7^7")], answer=["1"]),
        asyncio.to_thread(reward, completions=["\\boxed{\\frac{\\pi}{2}}"], answer=["\\pi/2"]),
    )
    beat.cancel()
    assert results == [[0.0], [1.0]]
    assert ticks >= 3  # the loop kept running while a worker was stuck on the power tower


@pytest.mark.timeout(60)
def test_pickles_without_processes():
    reward = get_reward("math", timeout_s=2.0)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone(completions=["\\boxed{\\sqrt{8}}"], answer=["2\\sqrt{2}"]) == [1.0]
    verifier = pickle.loads(pickle.dumps(Verifier(timeout_s=1.0)))
    assert verifier.timeout_s == 1.0 and verifier.check("1/2", "0.5").equal is True
    verifier.close()


@pytest.mark.timeout(60)
def test_pool_recovers_after_kills_and_uses_the_cache(verifier):
    first = verifier.check("1", "9^{9^{9^{9^{8}}}}")
    assert first.timed_out and first.equal is False
    again = verifier.check("1", "9^{9^{9^{9^{8}}}}")
    assert again == first  # cached: the hostile pair costs its deadline once
    assert verifier.check("\\{1,2\\}", "\\{2,1\\}").equal is True


def test_invalid_timeout_is_rejected():
    with pytest.raises(RewardError, match="timeout_s"):
        Verifier(timeout_s=0)


@pytest.mark.timeout(60)
def test_forked_child_gets_its_own_pool_and_leaves_the_parents_alone(verifier):
    import os

    assert verifier.check("x+1", "1+x").equal is True  # the parent's workers are running
    pid = os.fork()
    if pid == 0:  # child: use the same object, then exit through the normal shutdown path
        ok = verifier.check("2x", "x+x").equal is True
        verifier.close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert verifier.check("(x+1)^2", "x^2+2x+1").equal is True  # the parent's pool still works
