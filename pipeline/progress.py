"""The progress view of a run, shared by ``kickoff --wait`` and ``status``.

Settled pages / total, pages per second over the last half minute, an ETA, and per-country
completion. Before a country is discovered its size is estimated as TOP_N pages.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .ledger import OUTCOMES, Snapshot


class RateMeter:
    """Pages per second over a sliding window of samples."""

    def __init__(self, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, settled: int, at: float | None = None) -> float | None:
        now = time.monotonic() if at is None else at
        self.samples.append((now, settled))
        while len(self.samples) > 2 and now - self.samples[0][0] > self.window_s:
            self.samples.popleft()
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 - t0 >= 1.0 else None


@dataclass
class Progress:
    snapshot: Snapshot
    top_n: int
    rate: float | None

    @property
    def total(self) -> int:
        """Pages expected: the discovered ones, plus an estimate for countries not read yet."""
        undiscovered = len(self.snapshot.countries) - len(self.snapshot.discovered)
        return self.snapshot.expected + max(0, undiscovered) * self.top_n

    @property
    def eta_s(self) -> float | None:
        remaining = self.total - self.snapshot.settled
        if remaining <= 0:
            return 0.0
        return remaining / self.rate if self.rate else None

    def country_rows(self) -> list[tuple[str, int, int, str]]:
        """(slug, settled, expected, state) with state ``pending``, ``running``, ``done`` or ``failed``."""
        rows = []
        counts = self.snapshot.counts
        for slug in self.snapshot.countries:
            discovery = self.snapshot.discovered.get(slug)
            settled = counts.get(f"settled:{slug}", 0)
            if discovery is None:
                rows.append((slug, 0, self.top_n, "pending"))
            elif discovery.get("status") != "ok":
                rows.append((slug, 0, 0, "failed"))
            else:
                expected = counts.get(f"expected:{slug}", 0)
                rows.append((slug, settled, expected, "done" if settled >= expected else "running"))
        return rows

    def as_dict(self) -> dict[str, Any]:
        s = self.snapshot
        return {
            "run_id": s.run_id,
            "status": s.meta.get("status", "running"),
            "started_at": s.meta.get("started_at"),
            "finished_at": s.meta.get("finished_at"),
            "summary": s.meta.get("summary"),
            "settled": s.settled,
            "total": self.total,
            "expected": s.expected,
            **{kind: s.counts.get(kind, 0) for kind in OUTCOMES},
            "bytes": s.counts.get("bytes", 0),
            "pages_per_s": round(self.rate, 2) if self.rate is not None else None,
            "eta_s": round(self.eta_s, 1) if self.eta_s is not None else None,
            "countries": {
                slug: {"settled": settled, "expected": expected, "state": state}
                for slug, settled, expected, state in self.country_rows()
            },
        }

    def render(self, *, width: int = 100) -> str:
        s = self.snapshot
        pct = 100 * s.settled / self.total if self.total else 100.0
        rate = f"{self.rate:.1f} pages/s" if self.rate is not None else "-- pages/s"
        eta = duration(self.eta_s) if self.eta_s is not None else "--"
        rows = self.country_rows()
        done = sum(1 for r in rows if r[3] in ("done", "failed"))
        head = (
            f"run {s.run_id}  {s.settled}/{self.total} pages ({pct:.0f}%)  "
            f"saved {s.counts.get('saved', 0)} failed {s.counts.get('failed', 0)} "
            f"dead {s.counts.get('dead_lettered', 0)}  {rate}  ETA {eta}  countries {done}/{len(rows)}"
        )
        marks = {"done": "ok", "failed": "NO RANKING", "pending": "waiting"}
        cells = [
            f"{slug} {marks.get(state) or f'{settled}/{expected}'}" for slug, settled, expected, state in rows
        ]
        lines, line = [head], ""
        for cell in cells:
            cell = cell.ljust(26)
            if len(line) + len(cell) > width:
                lines.append(line.rstrip())
                line = ""
            line += cell
        if line:
            lines.append(line.rstrip())
        return "\n".join(lines)


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
