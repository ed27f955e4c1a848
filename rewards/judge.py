"""LLM-judge reward: a model compares the response with the reference (the paper's web-task grading).

The judge receives a plain synchronous `complete(messages)` callable, so this module needs no LLM
client: the engine adapts its own (`tfgrpo.rollout.scoring`), asking for the reply under the verdict's
JSON schema (`tfgrpo.rewards.verdict`). `complete` returns the reply text, or an object with `.text` and
`.schema_enforced` (the client's `Completion`) so the counters know which replies were enforced. A reply
without a readable verdict is asked once more with the parser's feedback; still none = unscored (None).
Errors of `complete` propagate: an outage must never turn into a score of 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from tfgrpo.rewards.base import Reward, Score, completion_text
from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.params import count
from tfgrpo.rewards.verdict import (
    REPLY_COUNTS,
    VerdictParse,
    count_outcome,
    parse_verdict,
    parse_verdict_reply,
    reply_format,
    retry_feedback,
)

#: messages -> the reply: its text, or an object with `.text` (and `.schema_enforced`), e.g. a Completion
Complete = Callable[[list[dict[str, str]]], Any]
#: called once per judged completion with its counter increments (replies, enforced, parsed, ...)
OnReply = Callable[[dict[str, int]], None]

_TEMPLATES = Path(__file__).with_name("templates")
_DEFAULT_TEMPLATE = _TEMPLATES / "judge.jinja"
_DEFAULT_SYSTEM_TEMPLATE = _TEMPLATES / "judge_system.jinja"


def _question_from_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return ""


class JudgeReward(Reward):
    """1.0 when the judge says CORRECT, 0.0 for INCORRECT, None when even the retry has no verdict.

    Args:
        complete: sync callable taking chat messages (list of {"role", "content"}) and returning the reply
            (text, or an object with `.text` and `.schema_enforced`).
        answer_key / question_key: dataset columns of the reference and the question (the question falls
            back to the prompt's last user message).
        template: path of a jinja2 template for the user message, with `question`, `reference`,
            `response` and `reply_format` (the verdict's JSON format; default: bundled templates/judge.jinja).
        system_template: path of a jinja2 template for the system message, no variables (default: bundled
            templates/judge_system.jinja).
        concurrency: judge calls in flight at once.
        on_reply: called with each judged completion's counter increments (the engine adds them to its
            accounting); `reply_counts` keeps the running totals either way.
    """

    name = "judge"

    def __init__(
        self,
        complete: Complete,
        *,
        answer_key: str = "answer",
        question_key: str = "problem",
        template: str | Path | None = None,
        system_template: str | Path | None = None,
        concurrency: int = 8,
        max_response_chars: int = 8000,
        on_reply: OnReply | None = None,
    ) -> None:
        super().__init__()
        if not callable(complete):
            raise RewardError("judge reward needs `complete`, a callable messages -> reply text")
        self._template = _load_template(Path(template) if template is not None else _DEFAULT_TEMPLATE)
        system_path = Path(system_template) if system_template is not None else _DEFAULT_SYSTEM_TEMPLATE
        self._system = _render_system(_load_template(system_path), system_path)  # no variables: render once
        self.complete = complete
        self.answer_key = answer_key
        self.question_key = question_key
        self.concurrency = count(self.name, "concurrency", concurrency)
        self.max_response_chars = count(self.name, "max_response_chars", max_response_chars)
        self.on_reply = on_reply
        #: replies, enforced, parsed, repaired, retried, lost over every completion judged so far
        self.reply_counts = dict.fromkeys(REPLY_COUNTS, 0)
        self._counts_lock = threading.Lock()  # judge calls run in worker threads

    def messages(self, question: str, reference: str, response: str) -> list[dict[str, str]]:
        if len(response) > self.max_response_chars:  # keep the ending: that is where the answer is
            response = "..." + response[-self.max_response_chars :]
        user = self._template.render(
            question=question, reference=reference, response=response, reply_format=reply_format()
        )
        return [{"role": "system", "content": self._system}, {"role": "user", "content": user}]

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        n = len(completions)
        if columns.get(self.answer_key) is None:
            raise RewardError(f"reward 'judge' needs the dataset column '{self.answer_key}'")
        references = _per_row(columns[self.answer_key], n)
        questions = _per_row(columns.get(self.question_key), n)
        prompt_list = list(prompts) if prompts is not None else [None] * n
        requests = []
        for completion, reference, question, prompt in zip(
            completions, references, questions, prompt_list, strict=True
        ):
            question_text = str(question) if question is not None else _question_from_prompt(prompt)
            requests.append(self.messages(question_text, str(reference), completion_text(completion)))
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            return list(pool.map(self._judge, requests))

    def _judge(self, messages: list[dict[str, str]]) -> Score:
        """One verdict: the reply, else one retry with the parser's feedback; counted either way."""
        text, enforced = _reply_of(self.complete(messages))
        first = final = parse_verdict_reply(text)
        retried = first.verdict is None
        if retried:
            feedback = retry_feedback(first.problem)
            retry_messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": feedback}]
            text, _ = _reply_of(self.complete(retry_messages))
            final = parse_verdict_reply(text)
        self._count(count_outcome(enforced=enforced, first=first, retried=retried, final=final))
        return _score(final, text)

    def _count(self, increments: dict[str, int]) -> None:
        with self._counts_lock:
            for key, value in increments.items():
                self.reply_counts[key] += value
            if self.on_reply is not None:
                self.on_reply(increments)


def _reply_of(reply: Any) -> tuple[str, bool]:
    """(text, generated under the schema) of what `complete` returned."""
    if isinstance(reply, str):
        return reply, False
    text = getattr(reply, "text", None)
    if not isinstance(text, str):
        raise RewardError(
            f"the judge's `complete` must return a string or an object with .text, got {type(reply).__name__}"
        )
    return text, bool(getattr(reply, "schema_enforced", False))


def _score(parsed: VerdictParse, reply: str) -> Score:
    if parsed.verdict is None:
        return Score(None, None, f"judge reply had no verdict ({parsed.problem}) after a retry: {reply[-120:]!r}")
    word = "correct" if parsed.verdict.correct else "incorrect"
    return Score(1.0 if parsed.verdict.correct else 0.0, None, f"judge: {word} ({parsed.verdict.reasoning[:160]})")


def _load_template(path: Path):  # -> jinja2.Template
    if not path.is_file():
        raise RewardError(f"judge template not found: {path}")
    import jinja2

    try:
        return _compile(path.read_text(encoding="utf-8"))
    except jinja2.TemplateSyntaxError as exc:
        raise RewardError(f"bad judge template {path} (line {exc.lineno}): {exc.message}") from None


@lru_cache(maxsize=16)
def _compile(source: str):  # -> jinja2.Template; cached: every JudgeReward built from the same file shares one
    import jinja2

    return jinja2.Template(source, undefined=jinja2.StrictUndefined)


def _render_system(template: Any, path: Path) -> str:
    import jinja2

    try:
        return template.render()
    except jinja2.UndefinedError as exc:
        raise RewardError(f"judge system template {path} takes no variables: {exc.message}") from None


def _per_row(values: Any, n: int) -> list[Any]:
    if values is None or isinstance(values, str) or not isinstance(values, Sequence):
        return [values] * n
    if len(values) != n:
        raise RewardError(f"reward 'judge': a column has {len(values)} values for {n} completions")
    return list(values)


__all__ = ["Complete", "JudgeReward", "OnReply", "parse_verdict"]
