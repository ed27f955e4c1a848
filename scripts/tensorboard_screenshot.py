"""The docs' screenshot of a learn run in TensorBoard (docs/tracking.md), taken in a real browser.

Runs a small `tfgrpo learn --report-to tensorboard` against the tests' scripted OpenAI-compatible world
(tests/helpers/learn_world.py: no model, no network), starts `tensorboard --logdir` on its event files, and
photographs the scalars dashboard in headless Debian chromium through playwright (the dev extra; chromium
from scripts/install.sh). Writes docs/images/tensorboard-learn.png (a palette PNG, kept under 300 KB).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/tensorboard_screenshot.py [--out docs/images/tensorboard-learn.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.learn_world import World, WorldServer, write_problems  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
TAGS = "train/accuracy|groups/kept|ops/applied|library/size|validation/epoch_mean_at_k|tokens/prompt"


def learn_run(work: Path) -> Path:
    """Two epochs of three steps each, validated, logged to TensorBoard; returns the event folder."""
    pairs = [(1, 2), (3, 4), (5, 6), (7, 8), (2, 9), (4, 4)]
    data = write_problems(work / "train.jsonl", pairs)
    val = write_problems(work / "val.jsonl", [(2, 2), (7, 1), (6, 3)])
    out = work / "learn-demo"
    options = ("-G", "4", "--epochs", "2", "--batch-size", "2", "--val-data", str(val), "--val-samples", "2")
    with WorldServer(World()) as server:
        command = [
            sys.executable,
            "-m",
            "tfgrpo",
            *server.learn_args(data, out, *options, "--report-to", "tensorboard"),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        subprocess.run(command, check=True, env=env, cwd=work, capture_output=True, timeout=600)
    return out / "tensorboard"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def screenshot(logdir: Path, target: Path) -> None:
    from playwright.sync_api import sync_playwright

    port = free_port()
    board = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/data/environment")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/#scalars")
            page.get_by_text("Filter tags (regular expressions supported)").first.wait_for(timeout=60_000)
            page.locator("tf-tag-filterer input").first.fill(TAGS)  # a Polymer paper-input: its inner input
            page.get_by_text("Ignore outliers in chart scaling").first.click()  # every point of a short run shown
            page.locator("tf-smoothing-input input[type=number]").first.fill("0")  # the raw values
            page.get_by_text("tag: train/accuracy").first.wait_for(timeout=60_000)
            page.wait_for_timeout(3000)  # the charts draw after their data arrives
            page.screenshot(path=str(target))
            browser.close()
    finally:
        board.terminate()
        board.wait(timeout=30)


def shrink(path: Path) -> None:
    """A 256-colour palette PNG: a dashboard's flat colours survive it, and the file stays small."""
    from PIL import Image

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "tensorboard-learn.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        logdir = learn_run(Path(work))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        screenshot(logdir, args.out)
    shrink(args.out)
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
