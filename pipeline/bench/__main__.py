"""``python -m pipeline.bench``: measure WorkerPool against a bare aiohttp loop on a simulated web.

Starts a simulated web on 127.0.0.1 (its own process), then per profile runs rounds of: the aiohttp
loop; in the clean profile the download floor (WorkerPool's download function in bare threads, no
pipeline) and the plain Dramatiq + requests actor the issue quotes (its own Redis and ``dramatiq``
processes); then WorkerPool (embedded Redis, ``dramatiq`` worker processes, the master's enqueue)
on the same jobs. Prints pages/s, CPU-seconds per 1,000 pages (crawler, master, Redis, web apart),
peak RSS per worker process, Redis commands per page and wall time, as medians and as ratios to
the loop, the floor and the plain actor, then the issue's targets. Every run's files are verified
against what the web served.

Exit status: 0 when every run finished and verified, 1 when one did not, 3 with ``--strict`` when
a target was missed, 4 when ``--max-seconds`` ran out, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from .runner import Bench, BenchTimeout, Options, compare, install_signal_handlers, machine, render
from .world import MAX_PAGES, PROFILES

QUICK = {"pages": 200, "repeat": 1, "processes": 2, "threads": 8}
DEFAULTS = {"pages": 4000, "repeat": 3, "processes": 2, "threads": 32}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Options]:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[2],
    )
    parser.add_argument("--profile", choices=(*PROFILES, "both"), default="both", help="default: both")
    parser.add_argument(
        "--pages",
        type=int,
        help=f"jobs per run, rounded up to 20 per country (default 4000, max {MAX_PAGES})",
    )
    parser.add_argument("--repeat", type=int, help="rounds; figures are medians (default 3)")
    parser.add_argument("--processes", type=int, help="WorkerPool worker processes (default 2)")
    parser.add_argument(
        "--threads",
        type=int,
        help="threads per worker process (default 32); the loop gets processes x threads in flight",
    )
    parser.add_argument(
        "--scaling",
        action="store_true",
        help="clean profile: also 1, 2 and 4 processes at the same total threads",
    )
    parser.add_argument(
        "--no-plain", action="store_true", help="skip the plain Dramatiq + requests actor (clean profile)"
    )
    parser.add_argument("--quick", action="store_true", help="a small smoke run: 200 pages, 1 round, 2 x 8")
    parser.add_argument(
        "--max-seconds", type=float, default=1800.0, help="stop everything after this long (default 1800)"
    )
    parser.add_argument(
        "--run-timeout", type=float, default=600.0, help="a run not done after this long fails (default 600)"
    )
    parser.add_argument(
        "--retry-backoff-ms",
        type=int,
        default=500,
        help="first retry delay, for both contenders (default 500)",
    )
    parser.add_argument(
        "--overlap",
        type=float,
        default=-1.0,
        help="share of ranking slots given to shared domains (default: clean 0, realistic 0.25)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json-out", type=Path, help="also write every figure here as JSON")
    parser.add_argument("--work-dir", type=Path, help="where runs write (default: a new temporary folder)")
    parser.add_argument(
        "--keep", action="store_true", help="keep every run's files (failed runs are always kept)"
    )
    parser.add_argument("--strict", action="store_true", help="exit 3 when a target is missed")
    args = parser.parse_args(argv)
    sizes = {**DEFAULTS, **(QUICK if args.quick else {})}
    sizes.update({k: getattr(args, k) for k in sizes if getattr(args, k) is not None})
    if not 1 <= sizes["pages"] <= MAX_PAGES or min(sizes["repeat"], sizes["processes"], sizes["threads"]) < 1:
        parser.error(f"--pages must be 1..{MAX_PAGES}; --repeat, --processes and --threads at least 1")
    profiles = list(PROFILES) if args.profile == "both" else [args.profile]
    options = Options(
        profiles=profiles,
        scaling=args.scaling,
        plain=not args.no_plain,
        max_seconds=args.max_seconds,
        run_timeout=args.run_timeout,
        retry_backoff_ms=args.retry_backoff_ms,
        overlap=args.overlap,
        seed=args.seed,
        keep=args.keep,
        **sizes,
    )
    return args, options


def main(argv: list[str] | None = None) -> int:
    args, options = parse(argv)
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="wp-bench-", dir=args.work_dir))
    install_signal_handlers(options.max_seconds)
    bench = Bench(options)
    code = 0
    try:
        bench.run(root)
    except BenchTimeout as e:
        bench.errors.append(str(e))
        code = 4
    except KeyboardInterrupt:
        bench.errors.append("interrupted")
        code = 130
    report, targets = compare(bench.results)
    print(render(bench.results, report, targets), flush=True)
    runs = [r for result in bench.results.values() for rs in result.runs.values() for r in rs]
    verified = bool(runs) and all(r.get("verified", {}).get("ok") for r in runs)
    if not code and not verified:
        code = 1
    if not code and args.strict and not all(t["ok"] for t in targets):
        code = 3
    print(f"\nverification: {'all runs passed' if verified else 'FAILED'}", flush=True)
    for error in bench.errors:
        print(f"error: {error}", file=sys.stderr)
    if args.json_out:
        document = {
            "machine": machine(),
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
            "verified": verified,
            "errors": bench.errors,
            "profiles": {
                name: {"world": result.world, "runs": result.runs, **report[name]}
                for name, result in bench.results.items()
            },
            "targets": targets,
        }
        args.json_out.write_text(json.dumps(document, indent=2) + "\n")
    if verified and not options.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"run files kept in {root}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
