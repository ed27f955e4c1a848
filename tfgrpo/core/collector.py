"""Python's cyclic garbage collector, paused while a command starts and resumed once its first requests are out.

A `tfgrpo learn` or `tfgrpo eval` process imports the CLI, its configs and the `openai` SDK (about a million
objects, nearly all alive until exit) before its first request, and the collector walks them again and again
while they are created: two full collections of 13 and 34 ms on that path, plus the young generations'
(measured with `gc.callbacks`, 2-core AMD EPYC). None of it frees anything. So the CLI pauses the collector
when it starts, and the first wave of requests, once on the wire, resumes it (`tfgrpo.rollout.warmup`),
first freezing what start-up built: those objects are moved out of the collector's view for good, so later
full collections of the run walk only what the run itself creates (a 39 ms one mid-run before). Commands that
send no wave resume it when they start (`tfgrpo.cli.lazy`), and the CLI resumes it when a command returns, so
a program that calls the CLI in-process never keeps a paused collector.

The collector's state is the process's own; this module only remembers whether *it* paused it, so a program
that disabled the collector itself is never switched back on by a run.
"""

from __future__ import annotations

import gc


class _Pause:
    """Whether the collector is paused by `pause_for_startup` (and not resumed since)."""

    active = False


def pause_for_startup() -> None:
    """Pause the collector for the start-up of a command (a no-op if it is already off)."""
    if gc.isenabled():
        gc.disable()
        _Pause.active = True


def resume_after_startup(*, freeze: bool = True) -> None:
    """Resume a collector paused by `pause_for_startup`, first freezing (with `freeze`) every object start-up
    built; a no-op when the collector was not paused by it."""
    if not _Pause.active:
        return
    _Pause.active = False
    if freeze:
        gc.freeze()
    gc.enable()


def paused_for_startup() -> bool:
    return _Pause.active
