"""WorkerPool: download the home pages of each country's most visited websites.

The library behind the Dramatiq actors in :mod:`actors`. Modules, in the order a job meets them:
settings, countries, semrush, jobs, fetch, storage, ledger, middleware, broker, kickoff, status.
This package's ``__init__`` imports nothing third-party, so ``python3 -m pipeline.bootstrap``
works before the dependencies are installed.
"""

__version__ = "0.1.0"
