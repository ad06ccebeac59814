"""The container image's install steps, run in a fresh venv (no container engine runs here).

The Dockerfile's ``COPY`` steps are mirrored into an empty folder and its ``RUN`` steps run there
with the venv's ``pip`` and ``python``: a missing file or tokenizer fails here as the image build
would. The fresh venv sees the suite's own dependencies (a ``.pth`` file), so ``pip install .``
builds and installs our package from the copied files alone and checks, without downloading them
again, that what it requires is installed; that the requirements resolve from nothing is what
``make install`` shows at the start of every CI run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def steps(kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in DOCKERFILE.read_text().splitlines() if line.startswith(kind + " ")]


def test_the_images_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    for *sources, target in steps("COPY"):
        if target.startswith("/"):
            continue  # the proxy config goes to /etc in the image; test_deploy.py checks it
        for source in sources:
            destination = app / Path(source).name if target.endswith("/") else app / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / source).is_dir():
                shutil.copytree(ROOT / source, destination, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(ROOT / source, destination)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    (site / "suite_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    runs = [" ".join(step) for step in steps("RUN")]
    pip_step = next(run for run in runs if run.startswith("pip install"))
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", *pip_step.split()], cwd=app, capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert "Successfully installed compact_hook" in installed.stdout.replace("-", "_")
    tokenizer_step = next(run for run in runs if "load_tokenizer" in run)
    code = tokenizer_step.split('"')[1]
    subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, check=True)
    located = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import compact_hook; print(compact_hook.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert located.stdout.startswith(str(site))  # the copy pip installed, not the checkout
    done = subprocess.run(
        [str(venv / "bin" / "compact-hook"), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "replay" in done.stdout
