"""`tfgrpo deploy`: operate the champion/challenger deployment serve keeps in its trace store's database.

    tfgrpo deploy status --traces URL        champion, challenger, the running test's bounds and rules now
    tfgrpo deploy propose LIB.json           put a library under test (refused if it holds test-set material)
    tfgrpo deploy promote | rollback         an operator's decision (rollback without a test: the last champion)
    tfgrpo deploy pause | resume             pause or resume learning (the learner proposes nothing meanwhile)
    tfgrpo deploy log                        the decision log

Every change is one compare-and-swap in the database, logged as decided by "operator USER"; a running
`tfgrpo serve --workers N` serves it within its poll interval.
"""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import COMMANDS
from tfgrpo.core.config import build_config
from tfgrpo.serve.deploy_settings import DeployCommandConfig

FLAGS = [opt.flag("traces")]
STATUS_FLAGS = [*FLAGS, opt.flag("reward_min"), opt.flag("reward_max")]
PROPOSE_FLAGS = [*FLAGS, opt.flag("deployment.test_data")]
JsonOpt = Annotated[bool | None, typer.Option("--json", help="Print JSON instead of lines.")]


def register(app: typer.Typer) -> None:
    deploy_app = typer.Typer(help=COMMANDS["deploy"][1], no_args_is_help=True)
    app.add_typer(deploy_app, name="deploy")
    deploy_app.command("status")(status_command)
    deploy_app.command("propose")(propose_command)
    deploy_app.command("log")(log_command)
    for name, change in CHANGES.items():
        deploy_app.command(name, help=change[1])(_change_command(name))


def _settings(config: str | None, overrides: dict[str, Any]) -> DeployCommandConfig:
    return build_config(DeployCommandConfig, config, overrides)


def _open(settings: DeployCommandConfig) -> Any:
    """The trace store (tables created if new) and the deployment in it."""
    from tfgrpo.serve.deployment import Deployment
    from tfgrpo.serve.traces import TraceStore

    store = TraceStore(settings.traces)
    return store, Deployment(store.engine)


def _operator() -> str:
    return f"operator {getpass.getuser()}"


@opt.config_options(DeployCommandConfig, STATUS_FLAGS)
def status_command(overrides: dict[str, Any], config: opt.ConfigOpt = None, as_json: JsonOpt = None) -> None:
    """The deployment, and while a test runs, its bounds and what its rules say now."""
    from tfgrpo.serve.operations import status

    settings = _settings(config, overrides)
    store, deployment = _open(settings)
    try:
        found = status(deployment, store.engine, settings.deployment, (settings.reward_min, settings.reward_max))
    finally:
        store.close()
    if as_json:
        print(json.dumps(found, indent=2))
        return
    print(f"revision {found['revision']}: champion {found['champion'][:12]}", end="")
    print(f", challenger {found['challenger'][:12]} under test" if found["challenger"] else ", no test running")
    if found["learning_paused"]:
        print("learning paused")
    test = found["test"]
    if test is not None:
        print(
            f"challenger - champion {test['estimate']:+.3f} in [{test['lower']:+.3f}, {test['upper']:+.3f}] "
            f"({test['kind']}; n {test['n_champion']} champion, {test['n_challenger']} challenger, "
            f"{test['n_pairs']} pairs)"
        )
        print(f"test: {test['decision']['action']} ({test['decision']['rule']})")
        print(f"guard: {test['guard_decision']['action']} ({test['guard_decision']['rule']})")


@opt.config_options(DeployCommandConfig, PROPOSE_FLAGS)
def propose_command(
    overrides: dict[str, Any],
    library_path: Annotated[Path, typer.Argument(help="Library JSON to put under test.", show_default=False)],
    config: opt.ConfigOpt = None,
) -> None:
    """Put LIB under test as the challenger (refused when a test runs, or when LIB leaks a test set)."""
    from tfgrpo.experiences import Library
    from tfgrpo.serve.operations import propose

    settings = _settings(config, overrides)
    library = Library.load(library_path)
    store, deployment = _open(settings)
    try:
        state = propose(
            deployment,
            library,
            source=f"file {library_path}",
            by=_operator(),
            test_data=settings.deployment.test_data,
        )
    finally:
        store.close()
    print(
        f"revision {state.revision}: challenger {(state.challenger or '')[:12]} under test against {state.champion[:12]}"
    )


@opt.config_options(DeployCommandConfig, FLAGS)
def log_command(
    overrides: dict[str, Any],
    config: opt.ConfigOpt = None,
    limit: Annotated[int, typer.Option("--limit", help="Show at most this many, the latest.")] = 100,
    as_json: JsonOpt = None,
) -> None:
    """The decision log, oldest first: versions, the rule that fired, who decided, n per arm and the bounds."""
    settings = _settings(config, overrides)
    store, deployment = _open(settings)
    try:
        entries = deployment.decisions(limit=limit)
    finally:
        store.close()
    for entry in entries:
        if as_json:
            print(json.dumps(entry))
            continue
        evidence = entry["evidence"] or {}
        shown = ""
        if "lower" in evidence:
            shown = (
                f" | n {evidence['n_champion']}/{evidence['n_challenger']}, "
                f"[{evidence['lower']:+.3f}, {evidence['upper']:+.3f}]"
            )
        print(
            f"{entry['revision']:>4} {entry['action']:<8} champion {(entry['champion'] or '')[:12]} "
            f"challenger {(entry['challenger'] or '-')[:12]} | {entry['rule']} | {entry['decided_by']}{shown}"
        )


#: name -> (the operation, the command's help)
CHANGES: dict[str, tuple[str, str]] = {
    "promote": ("promote_now", "Promote the challenger under test now (an operator's decision)."),
    "rollback": (
        "rollback_now",
        "End the running test with the champion kept; with no test running, serve the previous champion again.",
    ),
    "pause": ("pause", "Pause learning: the learner proposes no challenger until resume."),
    "resume": ("resume", "Resume learning."),
}


def _change_command(name: str) -> Any:
    @opt.config_options(DeployCommandConfig, FLAGS)
    def change(overrides: dict[str, Any], config: opt.ConfigOpt = None) -> None:
        from tfgrpo.serve import operations

        settings = _settings(config, overrides)
        store, deployment = _open(settings)
        try:
            if name in ("pause", "resume"):
                state = operations.set_paused(deployment, name == "pause", by=_operator())
            else:
                state = getattr(operations, CHANGES[name][0])(deployment, by=_operator())
        finally:
            store.close()
        challenger = f", challenger {state.challenger[:12]}" if state.challenger else ""
        print(f"revision {state.revision}: champion {state.champion[:12]}{challenger}")

    change.__name__ = f"{name}_command"
    return change
