"""Child processes of the benchmark: a start line protocol, and CPU and memory accounting.

Each measured program (web server, yardstick, WorkerPool master) runs in a process of its own, so
its CPU is its own. It imports what it needs, prints ``READY {json}``, waits for ``GO`` on stdin,
does its work, prints ``DONE {json}`` and stays alive until stdin closes: interpreter start-up is
outside the measurement, and the final CPU sample is taken while the process still exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..children import kill_group, stop_with_parent

# --- the child's side -----------------------------------------------------------------------------


def announce(kind: str, payload: dict[str, Any]) -> None:
    print(f"{kind} {json.dumps(payload)}", flush=True)


def wait_for_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "GO":
        sys.exit(f"expected GO on stdin, got {line!r}")


def finish(payload: dict[str, Any]) -> None:
    """Report, then linger until the parent closes stdin (it samples our CPU meanwhile)."""
    announce("DONE", payload)
    sys.stdin.read()


# --- the parent's side ----------------------------------------------------------------------------


class ChildFailed(RuntimeError):
    pass


class Child:
    """A child in its own process group, whose protocol lines are read by a background thread.

    ``protocol=False``: a program that does not speak the protocol (the ``dramatiq`` command of
    the plain actor): its output goes to the log, and :meth:`stop` sends SIGTERM at once, as it
    would never notice its stdin closing; nor its parent dying, so the kernel sends it SIGTERM then.
    """

    def __init__(
        self, name: str, command: list[str], *, env: dict[str, str], log_path: Path, protocol: bool = True
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.protocol = protocol
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.PIPE if protocol else subprocess.DEVNULL,
                stdout=subprocess.PIPE if protocol else log,
                stderr=log,
                text=True,
                start_new_session=True,
                preexec_fn=None if protocol else stop_with_parent,
            )
        self._lines: queue.Queue[str | None] = queue.Queue()
        if protocol:
            threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def expect(self, kind: str, timeout: float) -> dict[str, Any]:
        """The payload of the next ``kind`` line; raises ChildFailed on exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise ChildFailed(
                    f"{self.name}: no {kind} within {timeout:.0f}s (log: {self.log_path})"
                ) from None
            if line is None:
                raise ChildFailed(f"{self.name} exited with {self.process.wait()} (log: {self.log_path})")
            word, _, rest = line.strip().partition(" ")
            if word == kind:
                return json.loads(rest or "{}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("GO\n")
        self.process.stdin.flush()

    def stop(self, grace: float = 5.0) -> None:
        """Close stdin (a finished child exits), then SIGTERM and SIGKILL its whole group.

        A child without the protocol gets SIGTERM first, itself only: the ``dramatiq`` command
        stops its worker processes on its own, and kills them outright if they get a second one.
        """
        try:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            if not self.protocol and self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace)
            if self.process.poll() is None:
                kill_group(self.process.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(grace)
        finally:
            # Also when the --max-seconds alarm cut the graceful part short.
            kill_group(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- accounting ----------------------------------------------------------------------------------


@dataclass
class Snapshot:
    cpu: dict[int, float]  # pid -> CPU seconds (user + system)
    busy_s: float  # CPU seconds the whole machine has been busy
    at: float  # time.monotonic()


@dataclass
class _Tracked:
    process: psutil.Process
    group: str
    leaf: bool  # a child of a watched process (a dramatiq worker), not the watched process itself
    cpu_s: float = 0.0
    peak_rss: int = 0


def _peak_rss(process: psutil.Process) -> int:
    """The kernel's high-water mark (VmHWM) where there is one, else the current RSS."""
    rss = process.memory_info().rss
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return max(rss, int(line.split()[1]) * 1024)
    return rss


class ProcessMeter:
    """Samples CPU time and peak RSS of named groups of processes (with their children).

    A background thread samples every ``interval`` seconds so that children which come and go are
    seen; :meth:`snapshot` samples at once, for the exact start and end of a measurement.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._groups: dict[str, tuple[Callable[[], Iterable[int]], bool]] = {}
        self._tracked: dict[int, _Tracked] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-meter", daemon=True)

    def watch(self, group: str, pids: Callable[[], Iterable[int]] | int, *, children: bool = True) -> None:
        provider = pids if callable(pids) else (lambda: [pids])
        with self._lock:
            self._groups[group] = (provider, children)
        self.sample()

    def _track(self, pid: int, group: str, leaf: bool) -> None:
        if pid not in self._tracked:
            with contextlib.suppress(psutil.Error):
                self._tracked[pid] = _Tracked(psutil.Process(pid), group, leaf)

    def sample(self) -> None:
        with self._lock:
            for group, (provider, children) in self._groups.items():
                for pid in provider():
                    self._track(pid, group, leaf=False)
                    if children and pid in self._tracked:
                        with contextlib.suppress(psutil.Error):
                            for child in self._tracked[pid].process.children(recursive=True):
                                self._track(child.pid, group, leaf=True)
            for tracked in self._tracked.values():
                with contextlib.suppress(psutil.Error):
                    times = tracked.process.cpu_times()
                    tracked.cpu_s = times.user + times.system
                    tracked.peak_rss = max(tracked.peak_rss, _peak_rss(tracked.process))

    def snapshot(self) -> Snapshot:
        """CPU seconds of every process seen so far, and of the whole machine, sampled now."""
        self.sample()
        times = psutil.cpu_times()
        busy = sum(
            getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        with self._lock:
            return Snapshot({pid: t.cpu_s for pid, t in self._tracked.items()}, busy, time.monotonic())

    def cpu_between(self, before: Snapshot, after: Snapshot, group: str) -> float:
        with self._lock:
            pids = [pid for pid, t in self._tracked.items() if t.group == group]
        return sum(after.cpu.get(pid, 0.0) - before.cpu.get(pid, 0.0) for pid in pids)

    def foreign_load(self, before: Snapshot, after: Snapshot) -> float:
        """Share (%) of the machine's CPU used by processes not watched here, between two snapshots.

        Anything well above zero means something else ran during the measurement: its figures are
        suspect, throughput first.
        """
        ours = sum(after.cpu.get(pid, 0.0) - before.cpu.get(pid, 0.0) for pid in after.cpu)
        capacity = (after.at - before.at) * (psutil.cpu_count() or 1)
        return round(100 * max(0.0, after.busy_s - before.busy_s - ours) / capacity, 1) if capacity else 0.0

    def peak_rss(self, group: str) -> list[int]:
        """Peak RSS (bytes) of the group's worker processes: the children when there are any."""
        with self._lock:
            members = [t for t in self._tracked.values() if t.group == group]
        leaves = [t for t in members if t.leaf] or members
        return [t.peak_rss for t in leaves]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> ProcessMeter:
        self.watch("bench", os.getpid(), children=False)  # so that its own CPU is not taken as foreign
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
