"""``python3 -m pipeline.bootstrap demo|test|run ...``: from a fresh clone to a working command.

Needs nothing but Python 3.10+: creates ``.venv`` beside ``pyproject.toml``, installs the project
into it (again only when ``pyproject.toml`` changed), then runs, inside it:

* ``demo``: the offline demo run, ``python -m pipeline.kickoff --demo --local 2 --wait``;
* ``test``: the whole test suite, ``python -m pytest``, then ``ruff check``;
* ``bench``: ``python -m pipeline.bench`` (installs the ``bench`` extra);
* ``run MODULE ARGS...``: any ``python -m MODULE`` of the project, e.g. ``run pipeline.kickoff --help``.

Extra arguments are passed on. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".workerpool-installed"
USAGE = "usage: python3 -m pipeline.bootstrap {demo|test|bench|run MODULE} [ARGS...]"


def _python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(extras: str) -> Path:
    """Create the virtual environment and install the project with ``extras`` if needed."""
    if sys.version_info < (3, 10):  # noqa: UP036 - this runs on whatever python3 the user has
        sys.exit(f"error: WorkerPool needs Python 3.10 or newer, this is {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted and _python().exists():
        return _python()
    if not _python().exists():
        print(f"bootstrap: creating {VENV}", file=sys.stderr, flush=True)
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    print(f"bootstrap: installing WorkerPool[{extras}] into {VENV}", file=sys.stderr, flush=True)
    pip = [str(_python()), "-m", "pip", "--disable-pip-version-check", "-q"]
    try:
        subprocess.run([*pip, "install", "-e", f"{ROOT}[{extras}]"], check=True)
    except subprocess.CalledProcessError:
        sys.exit(
            "error: installing the dependencies failed (see pip's message above)\n"
            "  hint: check the network access to the package index, then run the command again"
        )
    STAMP.write_text(wanted + "\n")
    return _python()


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__ if argv else USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "demo":
        python = ensure_venv("dev")
        args = ["-m", "pipeline.kickoff", "--demo", "--local", "2", "--wait", *rest]
    elif command == "test":
        python = ensure_venv("dev,bench")
        code = subprocess.run([str(python), "-m", "pytest", *rest], cwd=ROOT).returncode
        if code != 0:
            return code
        return subprocess.run(
            [str(python), "-m", "ruff", "check", "pipeline", "actors", "tests"], cwd=ROOT
        ).returncode
    elif command == "bench":
        python = ensure_venv("dev,bench")
        args = ["-m", "pipeline.bench", *rest]
    elif command == "run" and rest:
        python = ensure_venv("dev")
        args = ["-m", *rest]
    else:
        print(USAGE, file=sys.stderr)
        return 2
    return subprocess.run([str(python), *args]).returncode


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
