"""``python -m pipeline.demo``: serve the demo world in the foreground until Ctrl-C.

For running workers by hand against it: the printed variables point them at the mirror.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .data import DEFAULT_SLOW_SECONDS, INJECTED_FAILURES
from .world import DemoWorld


def _announce(world: DemoWorld) -> None:
    print(f"demo world: {len(world.countries)} countries at {world.base_url}")
    print("injected failures: " + ", ".join(f"{d} ({k})" for d, k in INJECTED_FAILURES.items()))
    print("point WorkerPool at it with:")
    print(f"  export SEMRUSH_BASE_URL={world.semrush_base_url}")
    print(f"  export SITE_URL_TEMPLATE='{world.site_url_template}'")
    print("  export ALLOW_PRIVATE_ADDRESSES=true")
    print("Ctrl-C to stop.", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.demo", description="Serve the offline demo world until Ctrl-C."
    )
    parser.add_argument(
        "--slow-seconds", type=float, default=DEFAULT_SLOW_SECONDS, help="silence of the timeout site"
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="multiplies every site's latency")
    args = parser.parse_args(argv)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        with DemoWorld(
            slow_seconds=args.slow_seconds, latency_scale=args.latency_scale, port=args.port
        ) as world:
            _announce(world)
            while not done.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    print("demo world stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
