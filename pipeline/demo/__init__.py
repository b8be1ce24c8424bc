"""The offline demo world: a local Semrush mirror and local sites on 127.0.0.1.

Used by ``python -m pipeline.kickoff --demo``, by the tests and by the benchmark, so the whole
pipeline runs with no external network. ``python -m pipeline.demo`` serves it in the foreground.
"""

from __future__ import annotations

from .data import (
    DEFAULT_SLOW_SECONDS,
    INJECTED_FAILURES,
    INJECTED_PLACEMENTS,
    ExpectedOutcome,
    demo_rankings,
    expected_outcome,
    expected_outcomes,
    site_body,
    site_profile,
)
from .mirror import render_block_page, render_ranking_page
from .world import DemoWorld

__all__ = [
    "DEFAULT_SLOW_SECONDS",
    "INJECTED_FAILURES",
    "INJECTED_PLACEMENTS",
    "DemoWorld",
    "ExpectedOutcome",
    "demo_rankings",
    "expected_outcome",
    "expected_outcomes",
    "render_block_page",
    "render_ranking_page",
    "site_body",
    "site_profile",
]
