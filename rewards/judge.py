"""LLM-judge reward: a model compares the response with the reference (the paper's web-task grading).

The judge receives a plain synchronous `complete(messages) -> str` callable, so this module needs no
LLM client: the engine adapts its own client (e.g. `lambda m: client.chat_sync(m)[0].text`). Errors of
`complete` propagate: an outage must never turn into a score of 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Any

from rewards.base import Reward, Score, completion_text
from rewards.errors import RewardError

Complete = Callable[[list[dict[str, str]]], str]

_TEMPLATES = Path(__file__).with_name("templates")
_DEFAULT_TEMPLATE = _TEMPLATES / "judge.jinja"
_DEFAULT_SYSTEM_TEMPLATE = _TEMPLATES / "judge_system.jinja"
_VERDICT = re.compile(r"verdict\s*[:=]\s*\**\s*(correct|incorrect)\b", re.IGNORECASE)


def parse_verdict(reply: str) -> bool | None:
    """True/False from the judge's last `VERDICT: CORRECT|INCORRECT` line; None when there is none."""
    found = _VERDICT.findall(reply or "")
    return found[-1].lower() == "correct" if found else None


def _question_from_prompt(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return ""


class JudgeReward(Reward):
    """1.0 when the judge says CORRECT, 0.0 for INCORRECT, None when its reply has no verdict.

    Args:
        complete: sync callable taking chat messages (list of {"role", "content"}) and returning the reply.
        answer_key / question_key: dataset columns of the reference and the question (the question falls
            back to the prompt's last user message).
        template: path of a jinja2 template for the user message, with `question`, `reference`,
            `response` (default: bundled templates/judge.jinja).
        system_template: path of a jinja2 template for the system message, no variables (default: bundled
            templates/judge_system.jinja).
        concurrency: judge calls in flight at once.
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
        self.concurrency = concurrency
        self.max_response_chars = max_response_chars

    def messages(self, question: str, reference: str, response: str) -> list[dict[str, str]]:
        if len(response) > self.max_response_chars:  # keep the ending: that is where the answer is
            response = "..." + response[-self.max_response_chars :]
        user = self._template.render(question=question, reference=reference, response=response)
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
            replies = list(pool.map(self.complete, requests))
        scores = []
        for reply in replies:
            verdict = parse_verdict(reply)
            if verdict is None:
                scores.append(Score(None, None, f"judge reply had no VERDICT line: {reply[-120:]!r}"))
            else:
                justification = reply.strip().splitlines()[0][:160] if reply.strip() else ""
                scores.append(
                    Score(
                        1.0 if verdict else 0.0,
                        None,
                        f"judge: {'correct' if verdict else 'incorrect'} ({justification})",
                    )
                )
        return scores


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


__all__ = ["Complete", "JudgeReward", "parse_verdict"]
