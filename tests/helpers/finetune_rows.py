"""Rows of a learn run's rollouts.jsonl, for the finetune data tests."""

from __future__ import annotations

import json


def rollout(query_id, sample, reward, *, step=0, completion=None, error=None):
    return {
        "run": "r",
        "epoch": 0,
        "step": step,
        "batch": 0,
        "query_id": query_id,
        "problem": f"Problem {query_id}",
        "answer": "4",
        "sample": sample,
        "messages": [
            {"role": "system", "content": "[1]. experience"},
            {"role": "user", "content": f"Problem {query_id}"},
        ],
        "completion": completion or f"{query_id}-{step}-{sample} \\boxed{{{4 if reward else 5}}}",
        "reward": reward,
        "extracted": None,
        "reason": "",
        "error": error,
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "library_version": 0,
        "group_mean": 0.5,
        "group_std": 0.5,
    }


def write_jsonl(path, rows):
    """`rows` as a JSONL file at `path`; returns the path."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
