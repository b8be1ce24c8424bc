"""``python -m pipeline.bench.master``: kickoff's part of a measured WorkerPool run, timed precisely.

Does what ``python -m pipeline.kickoff --countries ... --wait`` does against a running fleet
(:func:`pipeline.kickoff.enqueue_run`, then wait for the summary), in its own process so the
master's CPU is measured apart. It polls the ledger every ``--poll`` seconds instead of kickoff's
5: the end of the run is known to within that, and the polls' Redis commands are reported so the
runner can leave them out of WorkerPool's count.
"""

from __future__ import annotations

import argparse
import time

from ..broker import install
from ..countries import resolve_many
from ..kickoff import enqueue_run, new_run_id
from ..settings import get_settings
from .procs import announce, finish, wait_for_go


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.master", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--countries", required=True, help="comma-separated slugs")
    parser.add_argument("--poll", type=float, default=0.025, help="seconds between two ledger polls")
    parser.add_argument("--timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)

    settings = get_settings()
    broker = install(settings)
    import actors  # noqa: F401, PLC0415 - declares the actors on the broker installed above

    countries = resolve_many(args.countries)
    client = broker.ledger_client
    client.ping()
    announce("READY", {"countries": len(countries)})
    wait_for_go()

    started = time.perf_counter()
    run_id = new_run_id()
    enqueue_run(broker, run_id, countries, settings)
    timeline = {"enqueued": time.perf_counter() - started}
    ledger = broker.ledger(run_id)
    polls = 0
    settled_then = 0
    deadline = started + args.timeout
    while time.perf_counter() < deadline:
        with client.pipeline(transaction=False) as pipe:
            pipe.hget(ledger.k_meta, "status")
            pipe.hlen(ledger.k_discovered)
            pipe.hget(ledger.k_counts, "settled")
            status, discovered, settled = pipe.execute()
        polls += 1
        now = time.perf_counter() - started
        if int(settled or 0) > 0:
            timeline.setdefault("first_settled", now)
        if discovered >= len(countries) and "all_discovered" not in timeline:
            timeline["all_discovered"] = now
            settled_then = int(settled or 0)
        if status == "finished":
            timeline["finished"] = now
            break
        time.sleep(args.poll)
    finish(
        {
            "run_id": run_id,
            "wall_s": timeline.get("finished"),
            "timeline": {k: round(v, 3) for k, v in timeline.items()},
            # Not WorkerPool's: left out of its count (the last HGET is the one just below).
            "settled_when_all_discovered": settled_then,
            "own_commands": {"hget": 2 * polls + 1, "hlen": polls},
            "summary": client.hget(ledger.k_meta, "summary"),
        }
    )


if __name__ == "__main__":
    main()
