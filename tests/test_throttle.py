"""The Semrush gate on a real Redis: one request at a time across processes, SEMRUSH_DELAY apart."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.throttle import LOCK, GateBusy, SemrushGate


def test_one_at_a_time_and_spaced_by_the_delay(redis_server):
    # Each thread has its own client, as separate worker processes would.
    gates = [SemrushGate(redis_server.client(), delay_s=0.1, hold_s=5) for _ in range(6)]
    inside, overlaps, turns = [0], [], []
    lock = threading.Lock()

    def take_turns(gate: SemrushGate) -> None:
        for _ in range(3):
            with gate.turn(max_wait_s=30):
                with lock:
                    inside[0] += 1
                    overlaps.append(inside[0])
                    turns.append(time.monotonic())
                time.sleep(0.01)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=take_turns, args=(g,)) for g in gates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(turns) == 18 and max(overlaps) == 1
    ordered = sorted(turns)
    gaps = [b - a for a, b in zip(ordered, ordered[1:], strict=False)]
    assert min(gaps) >= 0.1, "turns closer than the delay"
    assert max(gaps) < 0.6, "a waiter was not woken when the holder let go"


def test_a_long_wait_raises_instead_of_blocking_the_thread(redis_server):
    gate = SemrushGate(redis_server.client(), delay_s=0, hold_s=30)
    with gate.turn(), pytest.raises(GateBusy), gate.turn(max_wait_s=1):
        pass


def test_a_dead_holder_lets_go_when_its_hold_expires(redis_server):
    client = redis_server.client()
    client.set(LOCK, "a worker that died", px=300)
    started = time.monotonic()
    with SemrushGate(client, delay_s=0, hold_s=5).turn(max_wait_s=5):
        pass
    assert 0.2 < time.monotonic() - started < 2
