"""`tfgrpo library`: inspect and edit an experience library file (show, history, diff, rollback, dedup, apply).

Every edit saves LIB in place as the next version and keeps the history beside it (`LIB.history/`:
append-only op log + one snapshot per version), so any change can be diffed and rolled back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfgrpo.cli.lazy import LazyLibraryGroup
from tfgrpo.experiences.limits import DEFAULT_MAX_WORDS, DEFAULT_MERGE_THRESHOLD, DEFAULT_THRESHOLD

LibArg = Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)]
HistoryOpt = Annotated[
    Path | None, typer.Option("--history", help="History folder (default: LIB's stem + '.history' beside it).")
]
StoreOpt = Annotated[
    Path | None, typer.Option("--store", help="Vector store folder (default: LIB's stem + '.chroma' beside it).")
]
EmbedderOpt = Annotated[str | None, typer.Option("--embedder", help="local (offline MiniLM, default) | openai.")]
EmbedModelOpt = Annotated[
    str | None,
    typer.Option(
        "--embed-model", help="Embedding model: a sentence-transformers folder (local) or a model name (openai)."
    ),
]
EmbedUrlOpt = Annotated[
    str | None, typer.Option("--embed-base-url", help="OpenAI-compatible base URL of the embeddings endpoint.")
]


EXIT_ALL_REJECTED = 1  # `library apply`: the reply's operations were all rejected


def register(app: typer.Typer) -> None:
    library_app = typer.Typer(
        cls=LazyLibraryGroup,  # check, ablate, prune (docs/trust.md) load the eval stack only when they run
        help="Inspect and edit an experience library: show, history, diff, rollback, dedup, apply, check, ablate, prune.",
        no_args_is_help=True,
    )
    app.add_typer(library_app, name="library")
    library_app.command("show")(show)
    library_app.command("history")(history)
    library_app.command("diff")(diff)
    library_app.command("rollback")(rollback)
    library_app.command("dedup")(dedup)
    library_app.command("apply")(apply)


def show(
    library_path: LibArg,
    as_json: Annotated[bool | None, typer.Option("--json", help="Print the library file as JSON.")] = None,
    rendered: Annotated[
        bool | None, typer.Option("--rendered", help="Print exactly the text injected into prompts.")
    ] = None,
) -> None:
    """The experiences with ids, steps and usage counters."""
    from rich.console import Console
    from rich.table import Table

    from tfgrpo.experiences import Library, render
    from tfgrpo.experiences.limits import approximate_tokens

    library = Library.load(library_path)
    console = Console()
    if as_json:
        console.print_json(library.to_json())
        return
    if rendered:
        print(render(library))
        return
    facts = [
        f"version {library.version}",
        f"{len(library)} experiences",
        f"~{approximate_tokens(render(library))} prompt tokens",
    ]
    facts += [
        f"{name} {value}"
        for name, value in (("task", library.task), ("model", library.model), ("step", library.step))
        if value is not None
    ]
    table = Table(title=f"{library_path} ({', '.join(facts)})", title_justify="left")
    for column in ("id", "text", "created", "updated", "op", "in ctx (right/wrong)", "effect [95% CI] n"):
        table.add_column(column, overflow="fold")
    for e in library:
        table.add_row(
            e.id,
            e.text,
            _opt(e.created_step),
            _opt(e.updated_step),
            e.provenance.operation or "",
            f"{e.usage.in_context} ({e.usage.correct}/{e.usage.wrong})",
            e.credit.describe(),
        )
    console.print(table)
    for retired in library.retired:
        console.print(
            f"retired {retired.id} at step {_opt(retired.step)} ({retired.reason}: {retired.credit.describe()}): "
            f"{retired.text}",
            highlight=False,
            markup=False,
        )


def history(
    library_path: LibArg,
    ops: Annotated[bool | None, typer.Option("--ops", help="Also list every logged operation.")] = None,
    history_dir: HistoryOpt = None,
) -> None:
    """Versions kept in the history, with what each changed."""
    import json

    from rich.console import Console
    from rich.table import Table

    from tfgrpo.experiences import Library

    history = _history(library_path, history_dir)
    console = Console()
    versions = history.versions()
    if not versions and not library_path.is_file():
        Library.load(library_path)  # a mistyped path is an error, not "no history yet"
    if not versions:
        console.print(
            f"no history for {library_path} (expected {history.directory}); `tfgrpo library apply` creates one."
        )
        return
    records = history.records()
    table = Table(title=f"history of {library_path}", title_justify="left")
    for column in ("version", "step", "experiences", "applied", "rejected", "evicted", "other", "time"):
        table.add_column(column)
    for version in versions:
        rows = [r for r in records if r.get("version") == version]
        counts = {kind: sum(1 for r in rows if r.get("kind") == kind) for kind in ("applied", "rejected", "evicted")}
        other = ", ".join(sorted({str(r.get("kind")) for r in rows} - set(counts)))
        snapshot = history.load(version)
        stamp = rows[-1].get("time", "") if rows else ""
        table.add_row(
            str(version), _opt(snapshot.step), str(len(snapshot)), *(str(counts[k]) for k in counts), other, stamp
        )
    console.print(table)
    if ops:
        for record in records:
            detail = {k: v for k, v in record.items() if k not in ("version", "step", "time", "kind", "reason")}
            reason = f"  ({record['reason']})" if record.get("reason") else ""
            console.print(
                f"v{record.get('version')} {record.get('kind')}: {json.dumps(detail, ensure_ascii=False)}{reason}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )


def diff(
    library_path: LibArg,
    from_version: Annotated[int, typer.Option("--from", help="Older version.")],
    to_version: Annotated[int | None, typer.Option("--to", help="Newer version (default: LIB as it is now).")] = None,
    history_dir: HistoryOpt = None,
) -> None:
    """What changed between two versions, by stable id (added +, removed -, modified ~)."""
    from tfgrpo.experiences import Library, diff_libraries

    history = _history(library_path, history_dir)
    after = history.load(to_version) if to_version is not None else Library.load(library_path)
    print(diff_libraries(history.load(from_version), after).format())


def rollback(
    library_path: LibArg,
    to_version: Annotated[int, typer.Option("--to", help="Version whose experiences to restore.")],
    history_dir: HistoryOpt = None,
) -> None:
    """Restore an old version's experiences as a NEW version (history is never rewritten; ids are not reused)."""
    from tfgrpo.experiences import Library
    from tfgrpo.experiences.transaction import commit_version, open_library

    history = _history(library_path, history_dir)
    Library.load(library_path)  # a missing or unreadable library and an unknown version: refused before the lock
    history.load(to_version)
    with open_library(library_path, history) as current:
        restored = history.rollback(to_version, current=current)
        commit_version(library_path, history, restored)
    typer.echo(
        f"{library_path}: version {restored.version} = experiences of version {to_version} ({len(restored)} experiences)"
    )


def dedup(
    library_path: LibArg,
    threshold: Annotated[
        float, typer.Option("--threshold", help="Cosine similarity that makes a near-duplicate group.")
    ] = DEFAULT_THRESHOLD,
    merge_threshold: Annotated[
        float,
        typer.Option(
            "--merge-threshold",
            help="Cosine from which two experiences that no word-level difference tells apart are one lesson "
            "(learn's dedup rule), merged with --merge.",
        ),
    ] = DEFAULT_MERGE_THRESHOLD,
    merge: Annotated[
        bool | None, typer.Option("--merge", help="Merge what is one lesson and save LIB as the next version.")
    ] = None,
    store_dir: StoreOpt = None,
    history_dir: HistoryOpt = None,
    embedder: EmbedderOpt = None,
    embed_model: EmbedModelOpt = None,
    embed_base_url: EmbedUrlOpt = None,
) -> None:
    """Groups of near-duplicate experiences (vector store, offline embedder); optionally merge those that are
    one lesson by learn's rule (no number, operator, negation, contrast word or term tells them apart)."""
    from tfgrpo.experiences import Library, apply_operations
    from tfgrpo.experiences.dedup import dedup_library
    from tfgrpo.experiences.embedders import build_embedder
    from tfgrpo.experiences.store import ExperienceStore

    library = Library.load(library_path)
    store = ExperienceStore(
        store_dir or library_path.with_name(f"{library_path.stem}.chroma"),
        embedder=build_embedder(embedder or "local", model=embed_model, base_url=embed_base_url),
    )
    report = dedup_library(library, store, threshold=threshold, merge_threshold=merge_threshold)
    if not report.groups:
        typer.echo("no near-duplicates found")
    for group in report.groups:
        typer.echo(f"group (cosine >= {group.similarity:.3f}):")
        for experience_id in group.ids:
            typer.echo(f"  [{experience_id}]. {library.get(experience_id).text}")
    if merge and report.merges:
        from tfgrpo.experiences.transaction import open_library

        history = _history(library_path, history_dir)
        with open_library(library_path, history) as library:  # the file may have changed meanwhile
            result = apply_operations(
                library, report.merges, step=library.step, provenance={"operation": "merge"}, max_words=None
            )
            _commit(library_path, library, result, history_dir)
        typer.echo(f"merged {len(result.applied)} group(s); {library_path} is now version {result.library.version}")
    elif report.merges:
        for merge in report.merges:
            typer.echo(f"same lesson: {' '.join(f'[{i}]' for i in merge.ids)} -> {merge.experience!r}")
        typer.echo(f"{len(report.merges)} group(s) are the same lesson (learn's dedup rule); --merge merges them")


def apply(
    library_path: LibArg,
    reply_path: Annotated[
        Path, typer.Argument(help="A raw LLM reply (text file) with operations.", show_default=False)
    ],
    max_words: Annotated[
        int, typer.Option("--max-words", min=1, help="Word limit per experience.")
    ] = DEFAULT_MAX_WORDS,
    max_items: Annotated[
        int | None,
        typer.Option("--max-items", min=1, help="Library budget: most experiences kept (lowest value evicted)."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-prompt-tokens", min=1, help="Library budget: most tokens of the rendered library."),
    ] = None,
    step: Annotated[int | None, typer.Option("--step", min=0, help="Engine step to record (provenance).")] = None,
    dry_run: Annotated[bool | None, typer.Option("--dry-run", help="Show what would happen; save nothing.")] = None,
    history_dir: HistoryOpt = None,
) -> None:
    """Parse a raw reply, apply the valid operations, save LIB as the next version; print applied and rejected.
    Exit code 1 when the reply had operations and every one was rejected (nothing to save is not success)."""
    from tfgrpo.core.textfile import read_text
    from tfgrpo.experiences import Library
    from tfgrpo.experiences.errors import ExperienceError
    from tfgrpo.experiences.transaction import open_library

    Library.load(library_path)  # a missing or unreadable library or reply: refused before the lock (no .lock file)
    if not reply_path.is_file():
        raise ExperienceError(f"reply file not found: {reply_path}")
    reply = read_text(reply_path, error=ExperienceError)
    # the whole read-modify-write under the library's lock: a concurrent apply waits, no update is lost
    with open_library(library_path, _history(library_path, history_dir)) as library:
        _apply_reply(library_path, library, reply, max_words, max_items, max_tokens, step, dry_run, history_dir)


def _apply_reply(
    library_path: Path,
    library,
    reply: str,
    max_words,
    max_items,
    max_tokens,
    step,
    dry_run,
    history_dir: Path | None,
) -> None:
    from tfgrpo.experiences import Budget, apply_operations, parse_operations

    parsed = parse_operations(reply, library, max_words=max_words)
    limited = max_items is not None or max_tokens is not None
    budget = Budget(max_items=max_items, max_prompt_tokens=max_tokens) if limited else None
    result = apply_operations(
        library,
        parsed.operations,
        step=step,
        max_words=max_words,
        budget=budget,
        provenance={"step": step},
    )
    result.rejected[:0] = parsed.rejected  # parser rejections first, then apply-time ones
    if not parsed.found:
        typer.echo(f"no operations found: {parsed.feedback()}")
    for item in result.applied:
        typer.echo(f"applied  {item.operation.describe()} -> {', '.join(item.ids)}")
    for rejection in result.rejected:
        typer.echo(f"rejected {rejection.describe()}")
    for eviction in result.evicted:
        typer.echo(f"evicted  [{eviction.experience.id}] {eviction.experience.text} ({eviction.reason})")
    if parsed.skipped:
        typer.echo(f"skipped  {parsed.skipped} no-op item(s)")
    if dry_run or not result.changed:
        typer.echo(
            f"{library_path} unchanged (version {library.version})"
            + (" [dry run]" if dry_run and result.changed else "")
        )
        if result.rejected and not result.applied:
            raise typer.Exit(EXIT_ALL_REJECTED)
        return
    _commit(library_path, library, result, history_dir, step=step)
    typer.echo(
        f"{library_path}: version {library.version} -> {result.library.version} ({len(result.library)} experiences)"
    )


def _history(library_path: Path, history_dir: Path | None):
    from tfgrpo.experiences import History

    return History(history_dir) if history_dir else History.for_library(library_path)


def _commit(library_path: Path, before, result, history_dir: Path | None, *, step: int | None = None) -> None:
    """Baseline snapshot of the old version (first edit of a hand-written file), new snapshot + log, then save LIB
    (call under `open_library`: see experiences.transaction for the order and the recovery)."""
    from tfgrpo.experiences.transaction import commit_library

    commit_library(library_path, _history(library_path, history_dir), before, result, step=step)


def _opt(value: object) -> str:
    return "" if value is None else str(value)
