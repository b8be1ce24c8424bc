"""Checks that a finished run on disk keeps WorkerPool's promises (used by e2e and fault tests)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.demo import site_body
from pipeline.jobs import storage_path


@dataclass
class FinishedRun:
    run_id: str
    run_dir: Path
    manifest: list[dict[str, Any]]
    summary: dict[str, Any]

    def outcome(self, country: str, rank: int) -> dict[str, Any]:
        return next(line for line in self.manifest if line["country"] == country and line["rank"] == rank)


def check_finished_run(
    output_dir: Path, run_id: str, rankings: dict[str, list[Any]], top_n: int
) -> FinishedRun:
    """Every job settled once, files byte-identical to what the demo served, counts agree."""
    run_dir = output_dir / run_id
    manifest = [json.loads(line) for line in (run_dir / "manifest.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    keys = Counter((line["country"], line["rank"]) for line in manifest)
    assert all(n == 1 for n in keys.values()), "a job appears twice in the manifest"
    countries = list(summary["countries"])
    expected_keys = {(c, s.position) for c in countries for s in rankings[c][:top_n]}
    assert set(keys) == expected_keys, "manifest jobs differ from the rankings"

    totals = Counter(line["outcome"] for line in manifest)
    assert summary["totals"]["jobs"] == len(manifest)
    for kind in ("saved", "failed", "dead_lettered"):
        assert summary["totals"][kind] == totals[kind], kind
    assert summary["totals"]["bytes"] == sum(line["bytes"] for line in manifest)

    html_files = {
        p.relative_to(output_dir).as_posix() for p in run_dir.glob("*/*.html") if p.parent.name != "_sources"
    }
    saved = {line["path"] for line in manifest if line["outcome"] == "saved"}
    assert html_files == saved, "files on disk differ from the saved outcomes"
    assert not list(output_dir.rglob("*.part")), "a temporary file was left behind"
    for line in manifest:
        if line["outcome"] != "saved":
            assert line["reason"], line
            continue
        assert line["path"] == storage_path(run_id, line["country"], line["rank"], line["domain"])
        data = (output_dir / line["path"]).read_bytes()
        assert data == site_body(line["domain"]), f"{line['path']} is not what the server served"
        assert hashlib.sha256(data).hexdigest() == line["sha256"]
        assert len(data) == line["bytes"]
    for source in summary["sources"]:
        if source["status"] == "ok":
            data = (output_dir / source["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == source["sha256"]
    return FinishedRun(run_id, run_dir, manifest, summary)
