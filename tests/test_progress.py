"""The progress view: totals with estimates, rate, ETA and per-country rows."""

from __future__ import annotations

from pipeline.ledger import Snapshot
from pipeline.progress import Progress, RateMeter


def snapshot(**counts) -> Snapshot:
    return Snapshot(
        run_id="20261121T101500Z-3fa2",
        meta={"status": "running"},
        countries=["germany", "france", "japan"],
        counts={"expected": 40, "settled": 30, "saved": 29, "failed": 1, **counts},
        discovered={"germany": {"status": "ok", "jobs": 20}, "france": {"status": "ok", "jobs": 20}},
    )


def test_rate_is_measured_over_the_window():
    meter = RateMeter(window_s=10)
    assert meter.add(0, at=0.0) is None
    assert meter.add(50, at=5.0) == 10.0
    assert meter.add(100, at=20.0) == 50 / 15  # the 0 s sample slid out of the window


def test_total_counts_undiscovered_countries_as_top_n_and_eta_follows_rate():
    progress = Progress(
        snapshot(
            **{"expected:germany": 20, "settled:germany": 20, "expected:france": 20, "settled:france": 10}
        ),
        top_n=20,
        rate=5.0,
    )
    assert progress.total == 60
    assert progress.eta_s == 6.0
    assert progress.country_rows() == [("germany", 20, 20, "done"), ("france", 10, 20, "running"),
                                       ("japan", 0, 20, "pending")]  # fmt: skip
    text = progress.render()
    assert "30/60 pages" in text and "5.0 pages/s" in text and "ETA 6s" in text and "france 10/20" in text
    data = progress.as_dict()
    assert data["countries"]["japan"]["state"] == "pending" and data["eta_s"] == 6.0
