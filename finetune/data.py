"""Training data for every method, from a `tfgrpo learn` run's rollouts or from plain problem/answer JSONL.

    rollouts.jsonl ──► sft_examples     (rejection sampling: correct rollouts only)
                   ──► preference_pairs (correct vs wrong completion of one group: same query_id + step)
                   ──► kto_examples     (every scored rollout, reward as thumbs up / down)
                   ──► prompt_examples  (unique problems, for the RL methods)
    problems.jsonl ──► prompt_examples  ({"prompt": [user message], "answer": gold} for GRPO/GSPO/PPO)
    bundled name   ──► prompt_examples  (`easy`, `math_l5_train200`, `aime24`, ...: tfgrpo.core.datasets' own rows)

All outputs are TRL's conversational formats, so each tokenizer's chat template applies. By default
the prompt is the plain problem rendered by the very user template `tfgrpo eval` sends
(`tfgrpo/prompts/rollout_user.jinja`), so a fine-tuned model is trained on the prompt it is evaluated
with; not the rollout's messages:
those carry the learned experience library, and the fine-tuned model is meant to answer without it.
Pass `prompt_source="messages"` to keep the exact prompts the rollouts saw.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from tfgrpo.core.datasets import BUNDLED, iter_jsonl_objects, load_dataset_rows
from tfgrpo.core.errors import DatasetError
from tfgrpo.finetune.errors import FinetuneDataError
from tfgrpo.prompts import render_prompt as render_eval_prompt

PromptSource = Literal["problem", "messages"]
ROLLOUTS_FILE = "rollouts.jsonl"
DataKind = Literal["rollouts", "problems", "prepared"]


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-empty line; a bad line raises an error naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise FinetuneDataError(f"data file not found: {path}")
    yield from iter_jsonl_objects(path, error=FinetuneDataError)


def bundled_dataset_name(data: str | Path) -> str | None:
    """`data` when it names a problem set bundled with `tfgrpo eval` (easy, math_l5_train200, aime24, ...) and
    no file or folder of that name exists (a local path always wins); else None."""
    if not isinstance(data, str) or Path(data).exists():
        return None
    return data if data in BUNDLED else None


def load_bundled_problems(name: str) -> list[dict[str, Any]]:
    """The rows of a bundled problem set, read by the eval harness's own loader (same rows, same limit)."""
    try:
        problems = load_dataset_rows(name)
    except DatasetError as exc:
        raise FinetuneDataError(f"{name}: {exc}") from None
    return [{"id": p.id, "problem": p.problem, "answer": p.answer} for p in problems]


def resolve_data_file(data: str | Path) -> Path:
    """A learn run directory means its rollouts.jsonl; a file is used as is."""
    path = Path(data)
    if not path.exists():
        raise FinetuneDataError(f"data file not found: {data} (nor a bundled dataset: {', '.join(BUNDLED)})")
    if path.is_dir():
        path = path / ROLLOUTS_FILE
        if not path.is_file():
            raise FinetuneDataError(f"{data}: a directory must be a `tfgrpo learn` run holding {ROLLOUTS_FILE}")
    return path


def detect_kind(path: Path) -> DataKind:
    """What the first row looks like: learn rollouts, problem/answer rows, or rows already in TRL format."""
    for number, row in read_jsonl(path):
        if {"query_id", "completion", "reward"} <= row.keys():
            return "rollouts"
        if {"problem", "answer"} <= row.keys():
            return "problems"
        if row.keys() & {"messages", "prompt", "chosen", "completion"}:
            return "prepared"
        raise FinetuneDataError(
            f"{path}:{number}: unrecognised row (keys {sorted(row)}); expected learn rollouts "
            "(query_id, completion, reward), problems (problem, answer) or TRL rows (messages / prompt ...)"
        )
    raise FinetuneDataError(f"{path}: no rows")


def load_rollouts(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in read_jsonl(resolve_data_file(path)):
        missing = {"query_id", "problem", "completion", "reward"} - row.keys()
        if missing:
            raise FinetuneDataError(f"{path}:{number}: rollout row lacks {', '.join(sorted(missing))}")
        rows.append(row)
    return rows


def render_prompt(problem: str, template: str | None = None) -> str:
    """The user message of a problem: `template` (Jinja source) or the eval harness's own user template."""
    if template is None:
        return render_eval_prompt("rollout_user", problem=problem)
    from jinja2 import Template

    return Template(template, keep_trailing_newline=False).render(problem=problem).strip()


def _prompt_messages(row: dict[str, Any], source: PromptSource, template: str | None) -> list[dict[str, str]]:
    if source == "messages" and row.get("messages"):
        return [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    return [{"role": "user", "content": render_prompt(row["problem"], template)}]


def _scored(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rollouts with a reward and no error (an unscorable or failed sample teaches nothing)."""
    return (r for r in rows if r.get("reward") is not None and not r.get("error"))


def is_correct(row: dict[str, Any], threshold: float) -> bool:
    return row["reward"] is not None and float(row["reward"]) >= threshold


def sft_examples(
    rows: Iterable[dict[str, Any]],
    *,
    threshold: float = 1.0,
    prompt_source: PromptSource = "problem",
    template: str | None = None,
) -> list[dict[str, Any]]:
    """Rejection-sampled SFT: one prompt/completion row per distinct correct (problem, completion).

    TRL's prompt/completion format makes SFTTrainer train on the completion only (completion_only_loss).
    """
    seen: set[tuple[str, str]] = set()
    examples = []
    for row in _scored(rows):
        key = (str(row["query_id"]), row["completion"])
        if not is_correct(row, threshold) or key in seen:
            continue
        seen.add(key)
        examples.append(
            {
                "prompt": _prompt_messages(row, prompt_source, template),
                "completion": [{"role": "assistant", "content": row["completion"]}],
            }
        )
    return examples


def preference_pairs(
    rows: Iterable[dict[str, Any]],
    *,
    threshold: float = 1.0,
    max_pairs_per_group: int = 4,
    prompt_source: PromptSource = "problem",
    template: str | None = None,
) -> list[dict[str, Any]]:
    """DPO/IPO/cDPO/ORPO pairs: a correct and a wrong completion of the same group (query_id + step)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in _scored(rows):
        groups[(row.get("epoch"), row.get("step"), str(row["query_id"]))].append(row)
    pairs = []
    for members in groups.values():
        good = [r for r in members if is_correct(r, threshold)]
        bad = [r for r in members if not is_correct(r, threshold)]
        # zip-like pairing first (each completion used once) before reusing any: more diverse pairs.
        ordered = sorted(itertools.product(range(len(good)), range(len(bad))), key=lambda ij: (abs(ij[0] - ij[1]), ij))
        for i, j in ordered[:max_pairs_per_group]:
            if good[i]["completion"] == bad[j]["completion"]:
                continue
            pairs.append(
                {
                    "prompt": _prompt_messages(good[i], prompt_source, template),
                    "chosen": [{"role": "assistant", "content": good[i]["completion"]}],
                    "rejected": [{"role": "assistant", "content": bad[j]["completion"]}],
                }
            )
    return pairs


def kto_examples(
    rows: Iterable[dict[str, Any]],
    *,
    threshold: float = 1.0,
    prompt_source: PromptSource = "problem",
    template: str | None = None,
) -> list[dict[str, Any]]:
    """KTO: every scored rollout, label True when its reward reaches `threshold`."""
    return [
        {
            "prompt": _prompt_messages(row, prompt_source, template),
            "completion": [{"role": "assistant", "content": row["completion"]}],
            "label": is_correct(row, threshold),
        }
        for row in _scored(rows)
    ]


def prompt_examples(
    rows: Iterable[dict[str, Any]],
    *,
    template: str | None = None,
    prompt_source: PromptSource = "problem",
) -> list[dict[str, Any]]:
    """RL prompts with their gold `answer` column (what `tfgrpo.rewards.get_reward("math")` reads), one per problem."""
    seen: set[str] = set()
    examples = []
    for row in rows:
        key = str(row.get("query_id", row.get("id", row["problem"])))
        if key in seen:
            continue
        seen.add(key)
        examples.append({"prompt": _prompt_messages(row, prompt_source, template), "answer": str(row["answer"])})
    return examples


def load_problems(path: str | Path) -> list[dict[str, Any]]:
    rows = []
    for number, row in read_jsonl(path):
        if "problem" not in row or "answer" not in row:
            raise FinetuneDataError(f"{path}:{number}: a problem row needs 'problem' and 'answer' keys")
        rows.append(row)
    return rows


def load_prepared(path: str | Path, required: set[str]) -> list[dict[str, Any]]:
    rows = []
    for number, row in read_jsonl(path):
        if not required <= row.keys():
            raise FinetuneDataError(f"{path}:{number}: row lacks {', '.join(sorted(required - row.keys()))}")
        rows.append(row)
    return rows
