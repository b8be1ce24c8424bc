"""``python -m pipeline.status [RUN_ID]``: the progress of a run started anywhere.

The latest run by default. ``--json`` prints one JSON object for scripts; ``--watch`` refreshes
until the run is finished. With REDIS_URL unset it reads the embedded Redis of OUTPUT_DIR,
starting it from its append-only file if no kickoff is running.
"""

from __future__ import annotations

import json
import sys
import time

import redis

from .cli import Parser, add_common_arguments, open_run_redis, run, settings_from
from .errors import EXIT_OK
from .ledger import RunLedger, latest_run_id, list_runs
from .progress import Progress, RateMeter


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m pipeline.status", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_id", nargs="?", help="the run (default: the latest)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--watch", action="store_true", help="refresh every 2 s until the run is finished")
    parser.add_argument("--list", action="store_true", help="list the runs, latest first")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    settings = settings_from(args)
    with open_run_redis(settings) as (settings, _):
        client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
        if args.list:
            runs = list_runs(client)
            if args.json:
                print(json.dumps(runs))
            else:
                for run_id in runs:
                    meta = RunLedger(client, run_id).snapshot(with_discovered=False).meta
                    print(f"{run_id}  {meta.get('status', '?'):9}  started {meta.get('started_at', '?')}")
            return EXIT_OK
        run_id = args.run_id or latest_run_id(client)
        ledger = RunLedger(client, run_id)
        top_n = int(ledger.snapshot(with_discovered=False).meta.get("top_n", settings.top_n))
        meter = RateMeter()
        while True:
            snapshot = ledger.snapshot()
            progress = Progress(snapshot, top_n, meter.add(snapshot.settled))
            if args.json:
                print(json.dumps(progress.as_dict()), flush=True)
            else:
                print(progress.render(), flush=True)
                if snapshot.finished:
                    print(f"summary: {snapshot.meta.get('summary')}")
            if not args.watch or snapshot.finished:
                return EXIT_OK
            time.sleep(2)
            if not args.json and sys.stdout.isatty():
                print()


if __name__ == "__main__":
    run(main)
