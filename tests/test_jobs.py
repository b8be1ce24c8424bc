"""The download job: storage paths and message validation (hostile values included)."""

from __future__ import annotations

import os

import pytest
from conftest import make_settings

from pipeline.errors import InvalidJob, UnsafePath
from pipeline.jobs import (
    FetchJob,
    discover_country_schema,
    fetch_page_schema,
    storage_path,
    summarize_schema,
)

RUN = "20261121T101500Z-3fa2"


def body(**changes):
    job = FetchJob.create(RUN, "germany", 3, "amazon.de", "https://{domain}/").to_body()
    job.update(changes)
    return job


def test_storage_path_is_relative_and_ranked():
    assert storage_path(RUN, "germany", 3, "amazon.de") == f"{RUN}/germany/03-amazon.de.html"
    assert storage_path(RUN, "global", 20, "google.com") == f"{RUN}/global/20-google.com.html"


def test_created_job_round_trips_through_its_body():
    job = FetchJob.create(RUN, "germany", 3, "amazon.de", "https://{domain}/")
    assert job.url == "https://amazon.de/"
    assert job.key == "germany/03"
    assert FetchJob.from_body(job.to_body()) == job
    assert job.to_body() == {
        "v": 1, "run_id": RUN, "country": "germany", "rank": 3, "domain": "amazon.de",
        "url": "https://amazon.de/", "path": f"{RUN}/germany/03-amazon.de.html",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"v": 2}, "unknown job schema version"),
        ({"rank": "3"}, "bad rank"),
        ({"rank": 0}, "bad rank"),
        ({"rank": True}, "bad rank"),
        ({"run_id": "x"}, "bad run_id"),
        ({"country": "Germany!"}, "bad country slug"),
        ({"domain": "not a host"}, "not a hostname"),
        ({"domain": "localhost"}, "not a hostname"),
        ({"domain": "10.0.0.1"}, "not a hostname"),
        ({"url": "ftp://amazon.de/"}, "is not http or https"),
        ({"url": "file:///etc/passwd"}, "is not http or https"),
        ({"url": "http://127.0.0.1/"}, "private or loopback"),
        ({"url": "http://169.254.169.254/latest/"}, "private or loopback"),
        ({"url": "http://[::1]/"}, "private or loopback"),
        ({"url": "http://localhost:8080/"}, "private or loopback"),
        ({"path": "/etc/passwd"}, "escapes OUTPUT_DIR"),
        ({"path": f"{RUN}/../../x.html"}, "escapes OUTPUT_DIR"),
        ({"path": "other-run/germany/03-amazon.de.html"}, "not inside the run's folder"),
        ({"path": f"{RUN}\\..\\x"}, "bad path"),
    ],
)
def test_invalid_values_are_rejected_with_a_reason(changes, reason):
    with pytest.raises(InvalidJob, match=reason):
        FetchJob.from_body(body(**changes))


def test_missing_and_unknown_fields_are_named():
    job = body()
    del job["url"], job["path"]
    with pytest.raises(InvalidJob, match="misses field.*url, path"):
        FetchJob.from_body(job)
    with pytest.raises(InvalidJob, match="unknown field.*extra"):
        FetchJob.from_body(body(extra=1))
    with pytest.raises(InvalidJob, match="not a JSON object"):
        FetchJob.from_body(["a", "list"])


def test_private_hosts_are_allowed_only_when_configured():
    loopback = body(url="http://127.0.0.1:8000/site/amazon.de/")
    assert FetchJob.from_body(loopback, allow_private=True).url == loopback["url"]


def test_fetch_page_schema_checks_arity_and_symlinks(tmp_path):
    settings = make_settings(output_dir=tmp_path)
    assert fetch_page_schema([body()], {}, settings).rank == 3
    with pytest.raises(InvalidJob, match="exactly one argument"):
        fetch_page_schema([body(), body()], {}, settings)
    with pytest.raises(InvalidJob, match="exactly one argument"):
        fetch_page_schema([], {"job": body()}, settings)
    outside = tmp_path.parent / "outside"
    outside.mkdir(exist_ok=True)
    (tmp_path / RUN).mkdir()
    os.symlink(outside, tmp_path / RUN / "germany")
    with pytest.raises(UnsafePath):
        fetch_page_schema([body()], {}, settings)


def test_other_actor_schemas():
    settings = make_settings()
    discover_country_schema([RUN, "germany"], {}, settings)
    summarize_schema([RUN], {}, settings)
    summarize_schema([RUN, "germany"], {}, settings)
    summarize_schema([RUN, None], {}, settings)
    for schema, args in [
        (discover_country_schema, [RUN]),
        (discover_country_schema, [RUN, "../x"]),
        (summarize_schema, []),
        (summarize_schema, ["nope"]),
    ]:
        with pytest.raises(InvalidJob):
            schema(args, {}, settings)


def test_outcome_is_a_manifest_line():
    job = FetchJob.from_body(body())
    line = job.outcome("failed", reason="http_404: HTTP 404", attempts=1, elapsed_ms=12)
    assert line["outcome"] == "failed" and line["path"] is None and line["bytes"] == 0
    assert set(line) == {
        "run_id", "country", "rank", "domain", "url", "final_url", "status", "path", "bytes",
        "sha256", "attempts", "elapsed_ms", "outcome", "reason", "reused",
    }  # fmt: skip
