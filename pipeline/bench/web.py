"""``python -m pipeline.bench.web``: the simulated web on 127.0.0.1, in a process of its own.

aiohttp on one event loop: a thousand pages per second with their latency costs it little CPU,
where the demo world's ThreadingHTTPServer would be the bottleneck. Its own process keeps its CPU
apart from the contenders' (it is measured too). Routes:

- ``/website/top/`` and ``/website/top/{slug}/all/``: Semrush-like ranking pages, at once
- ``/site/{domain}/``: the site's page after its latency; 404 or a first-time 500 when injected
- ``/_bench/stats`` (GET): site requests so far; ``/_bench/reset`` (POST): forget them, and which
  flaky sites already failed, so that every contender meets the same world
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from collections import Counter

from aiohttp import web

from .procs import announce
from .world import HTTP_404, HTTP_500_ONCE, World


def build_app(world: World) -> web.Application:
    rankings = world.ranking_pages()
    requests: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    failed_once: set[str] = set()

    def respond(status: int, body: bytes) -> web.Response:
        statuses[status] += 1
        response = web.Response(status=status, body=body, content_type="text/html", charset="utf-8")
        if not world.keep_alive:
            response.force_close()
        return response

    async def ranking(request: web.Request) -> web.Response:
        page = rankings.get(request.match_info.get("slug", "global"))
        return web.Response(
            status=200 if page else 404,
            body=page or b"<h1>404</h1>",
            content_type="text/html",
            charset="utf-8",
        )

    async def site_page(request: web.Request) -> web.Response:
        domain = request.match_info["domain"]
        site = world.sites.get(domain)
        if site is None:
            return respond(404, b"<h1>Not Found</h1>")
        requests[domain] += 1
        await asyncio.sleep(site.latency_s)
        if site.failure == HTTP_404:
            return respond(404, b"<h1>Not Found</h1>")
        if site.failure == HTTP_500_ONCE and domain not in failed_once:
            failed_once.add(domain)
            return respond(500, b"<h1>Internal Server Error</h1>")
        return respond(200, world.body(domain))

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "site_requests": sum(requests.values()),
                "max_per_domain": max(requests.values(), default=0),
                "statuses": {str(k): v for k, v in statuses.items()},
            }
        )

    async def reset(request: web.Request) -> web.Response:
        requests.clear()
        statuses.clear()
        failed_once.clear()
        return web.json_response({"reset": True})

    app = web.Application()
    app.router.add_get("/website/top/", ranking)
    app.router.add_get("/website/top/{slug}/all/", ranking)
    app.router.add_get("/site/{domain}/", site_page)
    app.router.add_get("/_bench/stats", stats)
    app.router.add_post("/_bench/reset", reset)
    return app


async def serve(world: World, port: int) -> None:
    runner = web.AppRunner(build_app(world), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=2048)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Like every child of the benchmark, it ends when the parent closes its stdin.
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True
    ).start()
    announce("READY", {"port": bound, "world": world.describe()})
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.bench.web", description=__doc__.split("\n\n")[0]
    )
    World.add_arguments(parser)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    asyncio.run(serve(World.from_args(args), args.port))


if __name__ == "__main__":
    main()
