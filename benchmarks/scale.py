"""Learn and eval at 1,000-10,000 problems against a fast local upstream (issue 31): one table.

    OMP_NUM_THREADS=1 python benchmarks/scale.py [--latency-ms 200] [--sizes 1000,10000] [--quick]

Every measured command is `tfgrpo` as a user runs it (a fresh process, `--backend openai` pointed at the
scripted server of `engine.py`, in its own process, after a fixed latency). Rows:

- `learn N`: N synthetic addition problems, G 4, 1 epoch, batches of 100, concurrency 128, learn's default
  dedup (`enforce`: the vector store in its own process; `--dedup off` measures the engine alone) and
  `max_experiences: 100` (the scripted group analysis proposes one new lesson per problem, so without a cap
  the library, and every prompt, would grow with N);
- `eval, library L, inject all | topk:K`: a library of L distinct generated lessons (`tfgrpo import`),
  injected whole or by retrieval (topk embeds with the offline MiniLM model: the only model involved);
- `eval S samples`: S/4 problems x K 4, no library;
- `resume N (killed at ~90 %)`: `learn N` killed with SIGKILL half-way through the step after 90 % of its
  steps, then `learn --resume`; the smallest size is resumed the same way, so the resume's start-up can be
  compared after 9 and after 90 completed steps;
- `report`: `tfgrpo compare` on the largest eval (report.md, report.html, PNGs).

Columns: wall time from process start to exit; the SDK floor: a bare process that imports only the `openai`
SDK (`AsyncOpenAI` on its aiohttp transport, the raw `post`, as tfgrpo's backend) and sends the same number
of requests, of the same mean size, in the same waves (per step: rollouts, summaries, group analyses,
consolidation, read from the server's arrival log) at the same concurrency, to the same server; the
ratio; time per problem (per sample for evals); peak RSS of the tfgrpo process (`os.wait4`); run-dir size.

The server is `engine.py`'s scripted server with a lighter log: `engine.serve` keeps every request's
messages for `/log` (about 0.5 GB at the ~90,000 requests of a 10,000-problem run), so this one keeps
(arrival time, stage, prompt characters) and answers `/count` while a run is going (the kill at ~90 %).
"""

from __future__ import annotations

import sys

STAGE_MARKERS = {"summary": "<trajectory>", "group": "<attempt ", "consolidate": "<proposed_changes>"}
FILLER = "When a problem of this kind appears, check every step of the reasoning before answering. "


def floor_body(stage: str, index: int, chars: int) -> dict:
    """A request the scripted server answers as `stage`, of about `chars` prompt characters."""
    problem = f"What is {index}+{index + 7}?"
    head = "" if stage == "rollout" else f"{STAGE_MARKERS[stage]} {problem} "
    pad = (FILLER * (chars // len(FILLER) + 1))[: max(chars - len(head) - len(problem), 0)]
    if stage == "rollout":
        messages = [{"role": "system", "content": pad}, {"role": "user", "content": problem}]
    else:
        messages = [{"role": "user", "content": head + pad}]
    return {"model": "bench", "messages": messages}


def floor_child(base_url: str, concurrency: int, waves_path: str) -> None:
    """The floor process: import the SDK, send the waves (each gathered, `concurrency` in flight), exit."""
    import asyncio
    import json

    with open(waves_path, encoding="utf-8") as handle:
        waves = json.load(handle)

    async def main() -> None:
        import openai

        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key="x",
            max_retries=0,
            timeout=600,
            http_client=openai.DefaultAioHttpClient(timeout=600),
        )
        gate = asyncio.Semaphore(concurrency)

        async def send(body: dict) -> None:
            async with gate:
                await client.post("/chat/completions", body=body, cast_to=object)

        sent = 0
        for stage, count, chars in waves:
            await asyncio.gather(*(send(floor_body(stage, sent + i, chars)) for i in range(count)))
            sent += count
        await client.close()

    asyncio.run(main())


if __name__ == "__main__" and sys.argv[1:2] == ["--floor-child"]:
    floor_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    raise SystemExit(0)

import argparse  # noqa: E402  (below: the parent only; the floor child above imports nothing it does not need)
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import free_port, scripted_reply, write_problems  # noqa: E402  (the engine benchmark's script)
from engine_steps import compile_project, stage_of  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("rollout", "summary", "group", "consolidate")
GROUP_SIZE, BATCH, CONCURRENCY, SAMPLES = 4, 100, 128, 4


# -- the server ---------------------------------------------------------------------------------------------
def serve(port: int, latency_s: float, ready: multiprocessing.Event) -> None:
    """`engine.serve` with a compact log: (arrival time, stage, prompt characters) per request, and /count."""
    from aiohttp import web

    # sha1 of the question (the last message) -> times asked: as engine.serve, a rollout is right or wrong in turn
    # per question, whatever the experiences its prompt left out
    seen: dict[str, int] = {}
    log: list[tuple[float, str, int]] = []
    answered = [0]

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        log.append((time.time(), stage_of(messages), sum(len(str(m.get("content") or "")) for m in messages)))
        key = hashlib.sha1(json.dumps(messages[-1], sort_keys=True).encode()).hexdigest()
        count = seen.get(key, 0)
        seen[key] = count + 1
        await asyncio.sleep(latency_s)
        answered[0] += 1
        return web.json_response(
            {
                "id": "bench",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": scripted_reply(messages, count)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
        )

    async def counts(request: web.Request) -> web.Response:
        return web.json_response({"seen": len(log), "answered": answered[0]})

    async def request_log(request: web.Request) -> web.Response:
        return web.json_response(log)

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/count", counts)
    app.router.add_get("/log", request_log)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
        ready.set()
        await asyncio.Event().wait()

    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def _get(self, path: str):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}") as response:
            return json.loads(response.read())

    def count(self) -> dict:
        return self._get("/count")

    def log(self) -> list[tuple[float, str, int]]:
        return [tuple(entry) for entry in self._get("/log")]


@contextlib.contextmanager
def server(latency_s: float) -> Iterator[Server]:
    port = free_port()
    ready = multiprocessing.Event()
    process = multiprocessing.Process(target=serve, args=(port, latency_s, ready), daemon=True)
    process.start()
    if not ready.wait(30):
        raise RuntimeError("benchmark server did not start")
    try:
        yield Server(port)
    finally:
        process.terminate()
        process.join()


# -- measuring one process ----------------------------------------------------------------------------------
def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def child_env() -> dict[str, str]:
    """The environment of a measured `tfgrpo` process: this checkout's code, one BLAS thread."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def run_process(argv: list[str], *, kill_when=None) -> dict:
    """Run argv; wall time from start to exit and its peak RSS (`os.wait4`: this child's own rusage).
    `kill_when()`, polled every 20 ms, SIGKILLs the process once it returns a true value (returned as `killed`)."""
    with tempfile.TemporaryFile() as stderr:
        started = time.time()
        process = subprocess.Popen(argv, env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        killed = None
        if kill_when is not None:
            while process.poll() is None and not killed:  # poll() reaps only once the process has exited
                killed = kill_when()
                if killed:
                    os.kill(process.pid, signal.SIGKILL)
                else:
                    time.sleep(0.02)
        if process.returncode is None:
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            rss_mb = usage.ru_maxrss / 1024
        else:  # exited between poll() and here: reaped by poll, its rusage is in RUSAGE_CHILDREN only
            rss_mb = float("nan")
        wall = time.time() - started
        stderr.seek(0)
        tail = stderr.read().decode(errors="replace")[-3000:]
    if process.returncode != 0 and not killed:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({process.returncode}):\n{tail}")
    return {"started": started, "wall_s": wall, "rss_mb": rss_mb, "killed": killed}


def tfgrpo(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfgrpo", *args]


def llm_args(srv: Server) -> list[str]:
    return ["--backend", "openai", "--model", "bench", "--base-url", srv.base_url, "--api-key", "x"]


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


# -- the floor ----------------------------------------------------------------------------------------------
def waves_of(entries: list[tuple[float, str, int]]) -> list[list]:
    """[stage, requests, mean prompt chars] per stage of each step, in order; a step starts with the first
    rollout after a consolidation (an eval is one wave of rollouts)."""
    steps: list[dict[str, list[int]]] = []
    previous = "consolidate"
    for _, stage, chars in entries:
        if not steps or (stage == "rollout" and previous == "consolidate"):
            steps.append({})
        steps[-1].setdefault(stage, []).append(chars)
        previous = stage
    return [[s, len(step[s]), round(statistics.fmean(step[s]))] for step in steps for s in STAGES if s in step]


def floor(srv: Server, entries: list[tuple[float, str, int]], folder: Path) -> float:
    """Wall time of a bare SDK process sending the waves of `entries` to `srv`, from process start to exit."""
    waves = waves_of(entries)
    path = folder / "waves.json"
    path.write_text(json.dumps(waves))
    before = srv.count()["seen"]
    result = run_process([sys.executable, __file__, "--floor-child", srv.base_url, str(CONCURRENCY), str(path)])
    sent = srv.count()["seen"] - before
    if sent != sum(w[1] for w in waves):
        raise SystemExit(f"the floor sent {sent} requests, expected {sum(w[1] for w in waves)}")
    return result["wall_s"]


def since(entries: list[tuple[float, str, int]], started: float) -> list[tuple[float, str, int]]:
    return [e for e in entries if e[0] >= started]


# -- the rows -----------------------------------------------------------------------------------------------
def learn_argv(srv: Server, data: Path, out: Path, dedup: str) -> list[str]:
    config = data.parent / "learn.yaml"  # max_experiences has no command-line option
    config.write_text("max_experiences: 100\n")
    return tfgrpo(
        "learn", "--config", str(config), "--data", str(data), "--out", str(out), *llm_args(srv), "-G", str(GROUP_SIZE),
        "--epochs", "1", "--batch-size", str(BATCH), "--concurrency", str(CONCURRENCY), "--dedup", dedup,
    )  # fmt: skip


def row(name: str, result: dict, floor_s: float | None, units: int, unit: str, out: Path, note: str = "") -> dict:
    return {
        "name": name,
        "wall_s": result["wall_s"],
        "floor_s": floor_s,
        "per_unit_ms": result["wall_s"] / units * 1000,
        "unit": unit,
        "rss_mb": result["rss_mb"],
        "dir_mb": dir_mb(out),
        "load": result["load"],
        "note": note,
        **{k: v for k, v in result.items() if k not in ("wall_s", "rss_mb", "load")},
    }


def measured(argv: list[str], **kw) -> dict:
    before = load()
    result = run_process(argv, **kw)
    result["load"] = f"{before} → {load()}"
    return result


def learn_row(n: int, latency_s: float, tmp: Path, dedup: str) -> dict:
    data = write_problems(tmp / f"train-{n}.jsonl", n)
    out = tmp / f"learn-{n}"
    with server(latency_s) as srv:
        result = measured(learn_argv(srv, data, out, dedup))
        entries = srv.log()
        floor_s = floor(srv, entries, tmp)
    steps = json.loads((out / "metrics.json").read_text())["steps"]
    tenth = max(len(steps) // 10, 1)
    first, last = (statistics.fmean(s["wall_time_s"] for s in part) for part in (steps[:tenth], steps[-tenth:]))
    note = (
        f"{len(entries):,} requests, {len(steps)} steps; step wall time {first:.2f} s (first tenth) → "
        f"{last:.2f} s (last tenth); first request {entries[0][0] - result['started']:.2f} s after start"
    )
    return row(f"learn {n:,} problems", result, floor_s, n, "problem", out, note) | {
        "requests": len(entries),
        "first_request_s": entries[0][0] - result["started"],
        "data": data,
        "steps": len(steps),
    }


def resume_row(full: dict, latency_s: float, tmp: Path, dedup: str) -> dict:
    """`learn` killed half-way through the step after 90 % of its steps, then `--resume` to the end."""
    n, steps, needed = int(full["name"].split()[1].replace(",", "")), full["steps"], full["requests"]
    if steps < 2:
        raise SystemExit(f"resume needs at least 2 steps ({n} problems make {steps})")
    done = int(0.9 * steps)
    target = round(needed * (done + 0.5) / steps)  # steps send the same number of requests
    out = tmp / f"resume-{n}"
    with server(latency_s) as srv:
        argv = learn_argv(srv, full["data"], out, dedup)
        at_kill: dict = {}

        def kill_when() -> bool:
            count = srv.count()
            if count["seen"] >= target:
                at_kill.update(count)
                return True
            return False

        killed = run_process(argv, kill_when=kill_when)
        time.sleep(0.5)  # requests already on their way when the kill came still arrive
        at_kill["seen"] = srv.count()["seen"]
        state = json.loads((out / "state.json").read_text())
        result = measured([*argv, "--resume"])
        entries = srv.log()
        resumed = since(entries, result["started"])
        floor_s = floor(srv, resumed, tmp)
    before = len(entries) - len(resumed)
    twice = len(entries) - needed
    in_flight = at_kill["seen"] - at_kill["answered"]  # sent, and not answered before the kill
    remaining = (steps - state["completed_step"]) * BATCH
    note = (
        f"killed after {killed['wall_s']:.0f} s with {state['completed_step']}/{steps} steps done; requests "
        f"{before:,} + {len(resumed):,} = {len(entries):,} vs {needed:,} needed: {twice} sent twice, "
        f"{in_flight} were in flight at the kill; first request {resumed[0][0] - result['started']:.2f} s after "
        f"start (fresh run: {full['first_request_s']:.2f} s)"
    )
    return row(f"resume {n:,} (killed at ~90 %)", result, floor_s, remaining, "remaining problem", out, note) | {
        "twice": twice,
        "in_flight": in_flight,
        "first_request_s": resumed[0][0] - result["started"],
        "done_steps": state["completed_step"],
    }


LESSON_PARTS = (  # 25 x 8 x 5 = 1,000 distinct lessons
    "a sum of many terms; a product of fractions; a ratio of two lengths; an angle in a triangle; a percentage "
    "change; a remainder after division; a sequence with a pattern; a probability of an event; a system of two "
    "equations; an area of a circle; a speed over a distance; an average of a list; a count of arrangements; a "
    "power of a number; a square root; a unit conversion; a mixture of liquids; a time on a clock; a coin problem; "
    "an inequality; a logarithm; a function value; a digit in a number; a divisor of a number; a shape on a grid",
    "write down what is given; name the unknown; draw a small sketch; estimate the size of the answer; split the "
    "task into parts; list the cases; recall the matching rule; simplify the expression",
    "check the units; substitute the answer back; compare with the estimate; recount the cases; reread the question",
)


def write_library(tmp: Path, size: int) -> Path:
    """A library of `size` distinct lessons (no digits, so no gold answer inside), via `tfgrpo import`."""
    topics, firsts, checks = (part.split("; ") for part in LESSON_PARTS)
    lessons = [f"For {t}, first {f}, then {c} before you answer." for t in topics for f in firsts for c in checks]
    if size > len(lessons):
        raise SystemExit(f"at most {len(lessons)} generated lessons")
    text, path = tmp / f"lessons-{size}.txt", tmp / f"library-{size}.json"
    text.write_text("\n".join(lessons[:size]) + "\n")
    run_process(tfgrpo("import", str(text), "--out", str(path), "--format", "txt", "--force"))
    return path


def eval_row(name: str, problems: int, latency_s: float, tmp: Path, *, library: Path | None, inject: str) -> dict:
    data = write_problems(tmp / f"eval-{problems}.jsonl", problems)
    out = tmp / f"eval-run-{len(list(tmp.glob('eval-run-*')))}"
    with server(latency_s) as srv:
        argv = tfgrpo("eval", "--data", str(data), "--out", str(out), *llm_args(srv), "-k", str(SAMPLES))
        argv += ["--concurrency", str(CONCURRENCY)]
        if library is not None:
            argv += ["--library", str(library), "--inject", inject]
        result = measured(argv)
        entries = srv.log()
        floor_s = floor(srv, entries, tmp)
    samples = problems * SAMPLES
    if len(entries) != samples:
        raise SystemExit(f"{name}: the server saw {len(entries)} requests, expected {samples}")
    chars = statistics.fmean(e[2] for e in entries)
    note = f"{problems:,} problems x K {SAMPLES}; {chars:,.0f} prompt chars per request; first request "
    note += f"{entries[0][0] - result['started']:.2f} s after start"
    return row(name, result, floor_s, samples, "sample", out, note) | {"out": out}


def report_row(eval_run: dict, tmp: Path) -> dict:
    out = tmp / "report"
    result = measured(tfgrpo("compare", str(eval_run["out"]), "--out", str(out)))
    samples = int(eval_run["name"].split()[1].replace(",", ""))
    return row(f"report of the {samples:,}-sample eval (`tfgrpo compare`)", result, None, samples, "sample", out)


# -- the table ----------------------------------------------------------------------------------------------
def table(rows: list[dict]) -> str:
    lines = [
        "| run | wall time | SDK floor | ratio to floor | time per unit | peak RSS | run-dir size | load avg 1/5/15 (start → end) | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        floor_s = f"{r['floor_s']:.1f} s" if r["floor_s"] is not None else "–"
        ratio = f"{r['wall_s'] / r['floor_s']:.2f}" if r["floor_s"] is not None else "–"
        lines.append(
            f"| {r['name']} | {r['wall_s']:.1f} s | {floor_s} | {ratio} | {r['per_unit_ms']:.2f} ms / {r['unit']} | "
            f"{r['rss_mb']:.0f} MB | {r['dir_mb']:.1f} MB | {r['load']} | {r['note']} |"
        )
    return "\n".join(lines)


def targets(learns: list[dict], resumes: list[dict], report: dict | None) -> list[str]:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    lines = []
    if len(learns) >= 2:
        small, big = learns[0], learns[-1]
        growth = big["per_unit_ms"] / small["per_unit_ms"]
        lines.append(
            f"{verdict(growth <= 1.1)}: time per problem {small['per_unit_ms']:.1f} → {big['per_unit_ms']:.1f} ms "
            f"from {small['name']} to {big['name']} ({growth:.2f}x; target ≤ 1.10x; one run of each, minutes apart: "
            "benchmarks/scale_alternate.py checks it with the sizes alternating)"
        )
        rss = big["rss_mb"] / small["rss_mb"]
        lines.append(
            f"{verdict(rss <= 1.1)}: peak RSS {small['rss_mb']:.0f} → {big['rss_mb']:.0f} MB ({rss:.2f}x; target: "
            "not growing with problems, ≤ 1.10x)"
        )
    if len(resumes) >= 2:
        small, big = resumes[0], resumes[-1]
        grown = big["first_request_s"] - small["first_request_s"]
        lines.append(
            f"{verdict(grown <= 0.5)}: resume start-up (process start to its first request): "
            f"{small['first_request_s']:.2f} s after {small['done_steps']} steps done, {big['first_request_s']:.2f} s "
            f"after {big['done_steps']} (target: independent of the steps done, within 0.5 s)"
        )
    for r in resumes:
        lines.append(
            f"{verdict(r['twice'] <= max(r['in_flight'], CONCURRENCY))}: {r['name']}: {r['twice']} requests sent "
            f"twice, {r['in_flight']} unanswered by the server at the kill (target: only the calls the client had "
            f"outstanding, at most its concurrency {CONCURRENCY}: a reply the server wrote but the killed client "
            "had not read is one of them)"
        )
    if report is not None:
        lines.append(
            f"{verdict(report['wall_s'] <= 10)}: {report['name']} in {report['wall_s']:.1f} s (target: seconds, ≤ 10 s)"
        )
    return lines


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="learn sizes, comma-separated (default 1000,10000)")
    parser.add_argument("--libraries", default=None, help="library sizes (default 100,1000)")
    parser.add_argument("--topk", type=int, default=8, help="K of the topk:K rows")
    parser.add_argument("--library-problems", type=int, default=None, help="problems of each library eval (x K 4)")
    parser.add_argument("--eval-samples", type=int, default=None, help="samples of the big eval (default 10000)")
    parser.add_argument("--latency-ms", type=float, default=None, help="server latency (default 200; --quick: 20)")
    parser.add_argument(
        "--dedup", default="enforce", choices=("enforce", "hint", "off"), help="learn's dedup (default: its default)"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 20 ms: a smoke run of every row")
    parser.add_argument("--skip", default="", help="rows to leave out: learn,resume,library,eval,report")
    args = parser.parse_args()
    quick = args.quick
    sizes = [int(s) for s in (args.sizes or ("200,600" if quick else "1000,10000")).split(",")]
    libraries = [int(s) for s in (args.libraries or ("20,100" if quick else "100,1000")).split(",")]
    library_problems = args.library_problems or (50 if quick else 250)
    eval_samples = args.eval_samples or (800 if quick else 10_000)
    latency_s = (args.latency_ms or (20.0 if quick else 200.0)) / 1000
    skip = set(filter(None, args.skip.split(",")))

    print(
        f"{cpu_model()}, {os.cpu_count()} cores, load average {load()} at start; server latency {latency_s * 1000:.0f} ms"
    )
    compile_project()
    began = time.time()
    rows, learns, resumes, report = [], [], [], None
    with tempfile.TemporaryDirectory(prefix="tfgrpo-scale-") as folder:
        tmp = Path(folder)

        def add(r: dict) -> dict:
            rows.append(r)
            print(f"  [{time.time() - began:6.0f} s] {r['name']}: {r['wall_s']:.1f} s", file=sys.stderr, flush=True)
            return r

        if not {"learn", "resume"} <= skip:  # the resume rows need the learn rows' request counts
            learns = [add(learn_row(n, latency_s, tmp, args.dedup)) for n in sizes]
        if "resume" not in skip:
            resumes = [add(resume_row(full, latency_s, tmp, args.dedup)) for full in learns[:1] + learns[1:][-1:]]
        if "library" not in skip:
            for size in libraries:
                library = write_library(tmp, size)
                for inject in ("all", f"topk:{args.topk}"):
                    name = f"eval {library_problems * SAMPLES:,} samples, library {size:,}, inject {inject}"
                    add(eval_row(name, library_problems, latency_s, tmp, library=library, inject=inject))
        if "eval" not in skip:
            big = add(
                eval_row(
                    f"eval {eval_samples:,} samples",
                    eval_samples // SAMPLES,
                    latency_s,
                    tmp,
                    library=None,
                    inject="all",
                )
            )
            if "report" not in skip:
                report = add(report_row(big, tmp))
    print(f"\n{cpu_model()}; server latency {latency_s * 1000:.0f} ms; G {GROUP_SIZE}, batches of {BATCH}, "
          f"concurrency {CONCURRENCY}; total {time.time() - began:.0f} s; load average {load()} at the end\n")  # fmt: skip
    print(table(rows))
    print()
    print("\n".join(targets(learns, resumes, report)))


if __name__ == "__main__":
    main()
