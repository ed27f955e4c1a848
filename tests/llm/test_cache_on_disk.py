"""A sample the client hands on is already in the response cache's file: a process killed the next instant,
resumed, never pays for it twice."""

from __future__ import annotations

import asyncio
import sqlite3

from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.client import LLMClient


async def test_every_reply_is_on_disk_when_its_caller_gets_it(tmp_path):
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    client = LLMClient(ScriptedBackend(lambda request, index: f"reply to {request.messages[0].content}"), cache=cache)
    on_disk: list[bool] = []

    async def ask(i: int) -> str:
        reply = await client.chat([{"role": "user", "content": f"question {i}"}], tag="rollout")
        with sqlite3.connect(path) as other:  # a resumed process reading the file
            found = other.execute(
                "SELECT COUNT(*) FROM completions WHERE payload LIKE ?", (f'%"reply to question {i}"%',)
            )
            on_disk.append(found.fetchone()[0] == 1)
        return reply[0].text

    replies = await asyncio.gather(*(ask(i) for i in range(50)))  # one learn wave, answered together
    assert replies == [f"reply to question {i}" for i in range(50)]
    assert on_disk == [True] * 50 and len(cache) == 50
    again = LLMClient(ScriptedBackend(lambda request, index: "never sent"), cache=ResponseCache(path))
    assert [(await again.chat([{"role": "user", "content": "question 7"}]))[0].text] == ["reply to question 7"]
    assert again.accounting.snapshot()["total"]["calls"] == 0


def test_a_cache_outlives_the_event_loop_it_was_used_on(tmp_path):
    """learn, then eval, then a resumed learn: one process may run several loops over the same cache."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    client = LLMClient(ScriptedBackend(lambda request, index: "x"), cache=cache)
    for i in range(3):
        asyncio.run(client.chat([{"role": "user", "content": f"q{i}"}]))
    assert len(cache) == 3
