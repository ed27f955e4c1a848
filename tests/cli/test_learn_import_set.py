"""The import set of `tfgrpo learn` on its path to the first request, measured where it counts: a real
`python -m tfgrpo learn` against a local OpenAI-compatible server, with an audit hook that writes
`sys.modules` at the run's first `socket.connect` (the first request leaving). A package that joins that
path (numpy, scipy, the vector store, the math verifier, an ML stack) fails here with its name; the rest
load after the first request, in the network wait or on first use (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.serve_upstream import ScriptedUpstream, running

#: third-party top-level packages allowed before the first request: the CLI (typer, rich, click via typer's
#: shellingham), configs (pydantic, yaml), prompt templates (jinja2), the SDK and its transport (openai,
#: aiohttp and friends, httpx; brotli: aiohttp's `br` decoder, imported when installed, as the trackio extra
#: does), retries (tenacity), reply repair (json_repair)
ALLOWED = {
    "aiohappyeyeballs", "aiohttp", "aiosignal", "annotated_doc", "annotated_types", "anyio", "attr", "brotli", "certifi",
    "click", "distro", "filelock", "frozenlist", "h11", "h2", "hpack", "httpcore", "httpcore2",
    "httpx", "httpx2", "hyperframe", "idna", "jinja2", "jiter", "json_repair", "markdown_it", "markupsafe", "mdurl",
    "multidict", "openai", "propcache", "pydantic", "pydantic_core", "pygments", "rich", "shellingham",
    "sniffio", "tenacity", "tfgrpo", "truststore", "typer", "typing_extensions", "typing_inspection", "yaml",
    "yarl",
}  # fmt: skip
#: what must never be on that path (each costs 0.4 to 7 s of import on these machines)
HEAVY = {"numpy", "scipy", "chromadb", "onnxruntime", "math_verify", "sympy", "torch", "transformers", "litellm"}

AT_FIRST_CONNECT = """
import json, runpy, sys
out = sys.argv.pop(1)
seen = []
def at_first_connect(event, args):
    if event == "socket.connect" and not seen:
        seen.append(True)
        with open(out, "w") as modules:
            json.dump(sorted(sys.modules), modules)
sys.addaudithook(at_first_connect)
sys.argv[0] = "tfgrpo"
runpy.run_module("tfgrpo", run_name="__main__", alter_sys=True)
"""


def test_learn_imports_only_the_allowed_packages_before_its_first_request(tmp_path):
    upstream = ScriptedUpstream(responder=lambda messages, k: "The answer is \\boxed{4}.")
    modules_file = tmp_path / "modules.json"
    with running(upstream) as base:
        command = [sys.executable, "-c", AT_FIRST_CONNECT, str(modules_file), "learn", "--data", "easy_train"]
        command += ["--limit", "2", "-G", "2", "--epochs", "1", "--out", str(tmp_path / "run")]
        command += ["--backend", "openai", "--model", "m", "--base-url", base + "/v1", "--api-key", "x"]
        finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert upstream.bodies, "learn sent no request"
    modules = json.loads(modules_file.read_text())
    packages = {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names)
    packages = {name for name in packages if not name.startswith("_") and name != "cython_runtime"}
    assert "openai" in packages  # the hook fired at the request, after the backend was built
    assert not packages & HEAVY, f"loaded before the first request: {sorted(packages & HEAVY)}"
    assert packages <= ALLOWED, f"new on learn's path to its first request: {sorted(packages - ALLOWED)}"
    # the factory imports the chosen backend's adapter only (tfgrpo.llm.factory.build_backends)
    other_backends = {
        f"tfgrpo.llm.backends.{name}_backend" for name in ("litellm", "llamacpp", "transformers", "vllm")
    }
    assert "tfgrpo.llm.backends.openai_backend" in modules
    assert not other_backends & set(modules), sorted(other_backends & set(modules))
