"""The throughput benchmark: WorkerPool against a bare asyncio/aiohttp loop, on a simulated web.

``python -m pipeline.bench`` (see ``--help``). Modules: :mod:`.world` (what the simulated web
serves and the verifier), :mod:`.web` (the server process), :mod:`.yardstick` (the aiohttp loop),
:mod:`.floor` (WorkerPool's download alone, in bare threads), :mod:`.plain` (the plain Dramatiq +
requests actor the issue quotes, and its feeder), :mod:`.master` (WorkerPool's enqueue-and-wait,
timed), :mod:`.procs` (child processes, CPU and RSS accounting) and :mod:`.runner` (rounds,
medians, ratios, targets, the table).
"""
