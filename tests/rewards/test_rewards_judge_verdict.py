"""The judge's verdict under a schema: one pydantic model gives the JSON schema, the prompt's reply format and
the parser; a malformed verdict is repaired or asked again, and every outcome is counted."""

from __future__ import annotations

import json

import pytest

from tfgrpo.rewards import JudgeReward
from tfgrpo.rewards.verdict import JudgeVerdict, parse_verdict_reply, reply_format, verdict_schema

VALID = json.dumps({"reasoning": "Both say 12.", "verdict": "CORRECT"})


def test_schema_follows_the_model_and_is_strict():
    schema = verdict_schema()
    assert set(schema["properties"]) == set(JudgeVerdict.model_fields) == set(schema["required"])
    assert schema["additionalProperties"] is False
    assert schema["properties"]["verdict"]["enum"] == ["CORRECT", "INCORRECT"]
    assert (
        schema["properties"]["reasoning"]["maxLength"] == JudgeVerdict.model_fields["reasoning"].metadata[0].max_length
    )
    assert list(schema["properties"]) == ["reasoning", "verdict"]  # justification before the verdict


def test_the_judge_prompt_shows_the_reply_format_of_the_schema():
    text = reply_format()
    assert '"verdict": "CORRECT" or "INCORRECT"' in text
    assert JudgeVerdict.model_fields["reasoning"].description.rstrip(".") in text
    [_, user] = JudgeReward(lambda m: VALID).messages("q", "r", "s")
    assert text in user["content"]


@pytest.mark.parametrize(
    ("reply", "correct", "strict"),
    [
        (VALID, True, True),
        ('Here:\n```json\n{"reasoning": "no", "verdict": "incorrect",}\n```', False, False),  # fence, case, comma
        ('I checked. {"reasoning": "same number", "verdict": "CORRECT"} Done.', True, False),  # prose around it
        ("Same value.\nVERDICT: CORRECT", True, False),  # a custom template's line format
        ('{"reasoning": "x", "verdict": "MAYBE"}', None, False),
        ('{"reasoning": "cut off", "verdict": "CORR', None, False),
        ("", None, False),
    ],
)
def test_tolerant_parse(reply, correct, strict):
    parsed = parse_verdict_reply(reply)
    assert (None if parsed.verdict is None else parsed.verdict.correct) == correct
    assert parsed.strict == strict


class Enforced:
    """What the client layer's completer returns: text plus whether the schema was enforced."""

    def __init__(self, text: str, schema_enforced: bool = True) -> None:
        self.text, self.schema_enforced = text, schema_enforced


def test_a_malformed_verdict_is_retried_with_feedback_and_counted():
    calls: list[list[dict[str, str]]] = []
    seen_outcomes: list[dict[str, int]] = []

    def complete(messages):
        calls.append(messages)
        if len(messages) > 2:  # the retry: carries the bad reply and the feedback
            return Enforced(VALID)
        response = messages[-1]["content"]
        if "Response:\nA" in response:
            return Enforced(VALID)  # used as it came
        if "Response:\nB" in response:
            return Enforced('{"reasoning": "no", "verdict": "incorrect"}')  # repaired: lower case
        return Enforced("The answer looks fine to me.", schema_enforced=False)  # nothing: retried

    reward = JudgeReward(complete, concurrency=1, on_reply=seen_outcomes.append)
    scores = reward.score(["A", "B", "C"], answer=["12"] * 3, problem=["7+5?"] * 3)
    assert [s.value for s in scores] == [1.0, 0.0, 1.0]
    assert "Both say 12." in scores[0].reason
    [retry] = [m for m in calls if len(m) > 2]
    assert retry[2] == {"role": "assistant", "content": "The answer looks fine to me."}
    assert "could not be read as a verdict" in retry[3]["content"] and reply_format() in retry[3]["content"]
    assert reward.reply_counts == {"replies": 3, "enforced": 2, "parsed": 1, "repaired": 1, "retried": 1, "lost": 0}
    assert len(seen_outcomes) == 3 and sum(o["retried"] for o in seen_outcomes) == 1


def test_a_verdict_still_missing_after_the_retry_is_unscored_and_lost_not_a_crash():
    reward = JudgeReward(lambda messages: "{{{ not json", concurrency=1)
    [score] = reward.score(["x"], answer=["y"])
    assert score.value is None and "after a retry" in score.reason
    assert reward.reply_counts["lost"] == 1 and reward.reply_counts["retried"] == 1
