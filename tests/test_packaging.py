"""The installed package owns one top-level name, `tfgrpo`: the wheel holds rewards/, experiences/, eval/
and finetune/ as tfgrpo.rewards, tfgrpo.experiences, tfgrpo.eval and tfgrpo.finetune, and another
distribution with any of those four names is neither broken by tfgrpo nor breaks it."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("rewards", "experiences", "eval", "finetune")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built (no network, no build isolation) from a copy of the checkout's files."""
    work = tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in listed:
        source, target = ROOT / name, work / "src" / name
        if source.is_symlink() or source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(work / "dist"),
            ".",
        ],
        cwd=work / "src",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (path,) = (work / "dist").glob("tfgrpo-*.whl")
    return path


def test_the_wheel_has_one_top_level_name_and_every_data_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"tfgrpo", f"{wheel.name.split('-py3')[0]}.dist-info"}
    for expected in (
        "tfgrpo/rewards/math.py",
        "tfgrpo/rewards/templates/judge.jinja",
        "tfgrpo/experiences/templates/library.jinja",
        "tfgrpo/eval/runner.py",
        "tfgrpo/finetune/configs/grpo_multi_gpu.yaml",
        "tfgrpo/core/data/aime24.jsonl",
        "tfgrpo/experiment/recipes/quickstart.yaml",
    ):
        assert expected in names, expected


OTHER_DISTRIBUTION = """
import {name}
assert {name}.OWNER == "another distribution", {name}.__file__
"""

USE_TFGRPO = """
import json, runpy, sys
from tfgrpo.rewards import get_reward
from tfgrpo.experiences import Library, render
from tfgrpo.experiences.model import Experience
import tfgrpo.eval.runner, tfgrpo.finetune.run
score = get_reward("math").score(["so \\\\boxed{1/2}"], answer=["0.5"])[0].value
text = render(Library(experiences=[Experience(id="G0", text="Check the units.")]))
sys.argv = ["tfgrpo", "--help"]
try:
    runpy.run_module("tfgrpo", run_name="__main__")
except SystemExit as exit:
    assert exit.code in (0, None)
print(json.dumps({"score": score, "rendered": "Check the units." in text, "from": tfgrpo.__file__}))
"""


@pytest.mark.parametrize("order", ["theirs first", "tfgrpo first"])
def test_another_distribution_named_like_our_folders_coexists_with_tfgrpo(wheel, tmp_path, order):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    for name in FOLDERS:  # the other distribution: four top-level packages of those names
        (site / name).mkdir()
        (site / name / "__init__.py").write_text('OWNER = "another distribution"\n')
    theirs = "".join(OTHER_DISTRIBUTION.format(name=name) for name in FOLDERS)
    ours = "import tfgrpo\n" + USE_TFGRPO
    code = theirs + ours + theirs if order == "theirs first" else ours + theirs
    # only the unpacked wheel and the other distribution on the path: not this checkout, not its editable install
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert result == {"score": 1.0, "rendered": True, "from": str(site / "tfgrpo" / "__init__.py")}


def test_no_file_of_the_project_imports_the_folders_by_their_bare_names():
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    bare = []
    for name in listed:
        path = ROOT / name
        if path.is_symlink() or not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), name)):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            bare += [f"{name}:{node.lineno}: {module}" for module in modules if module.split(".")[0] in FOLDERS]
    assert len(listed) > 300 and bare == []
