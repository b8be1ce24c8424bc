"""Child processes that stop when the process that started them dies, however it dies.

Kickoff starts workers and an embedded Redis in their own sessions (so a Ctrl-C meant for it
does not kill them half-way): if kickoff is killed outright, nothing would stop them. On Linux
the kernel sends them SIGTERM, a graceful stop for both, when their parent dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal


def _load_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: only an orderly stop of the parent stops them
        return None


#: Looked up at import: between fork and exec, only the call itself runs.
_prctl = _load_prctl()
_PR_SET_PDEATHSIG = 1


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by ``pid`` (a child started in its own session), if it is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_with_parent() -> None:
    """``preexec_fn`` for subprocess.Popen: SIGTERM the child when its parent dies.

    The kernel means the parent *thread*: start such children from a thread that lives as long
    as they should (the embedded Redis, restarted from test threads, does not use this).
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
