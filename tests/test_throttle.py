"""The Semrush gate on a real Redis: one request at a time across processes, SEMRUSH_DELAY apart,
and turns booked ahead so that a far one never holds a worker thread."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import dramatiq
import pytest
from conftest import make_settings
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage

from pipeline import tasks
from pipeline.ledger import RunLedger
from pipeline.middleware import Defer, DurableRetries
from pipeline.throttle import LOCK, NEXT_TURN, NOT_BEFORE, GateBusy, SemrushGate


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
    gate = SemrushGate(redis_server.client(), delay_s=0.001, hold_s=30)
    with gate.turn(), pytest.raises(GateBusy), gate.turn(max_wait_s=1):
        pass


def test_a_dead_holder_lets_go_when_its_hold_expires(redis_server):
    client = redis_server.client()
    client.set(LOCK, "a worker that died", px=300)
    started = time.monotonic()
    with SemrushGate(client, delay_s=0.001, hold_s=5).turn(max_wait_s=5):
        pass
    assert 0.2 < time.monotonic() - started < 2


def test_no_delay_turns_the_gate_off(redis_server):
    client = redis_server.client()
    gate = SemrushGate(client, delay_s=0, hold_s=5)
    with gate.turn(max_wait_s=0.1), gate.turn(max_wait_s=0.1):  # two at once: nobody waits
        assert gate.reserve() == 0
    assert not client.keys("wp:semrush:*")


def test_turns_are_booked_a_delay_apart(redis_server):
    gates = [SemrushGate(redis_server.client(), delay_s=2, hold_s=5) for _ in range(2)]
    waits = [gates[i % 2].reserve() for i in range(4)]
    assert [round(w) for w in waits] == [0, 2, 4, 6]
    with gates[0].turn(max_wait_s=1):  # booking is a schedule, not the lock: the first turn is free
        pass


def test_a_far_turn_defers_the_discovery_instead_of_holding_the_thread(redis_server, tmp_path, monkeypatch):
    client = redis_server.client()
    ledger = RunLedger(client, "20261121T101500Z-3fa2")
    ledger.create(["germany"], {})
    gate = SemrushGate(client, delay_s=3, hold_s=5)
    for _ in range(3):  # three countries booked before this one: its turn is 9 s away
        gate.reserve()
    ctx = SimpleNamespace(
        # Nothing listens there: a request to Semrush would fail, not defer.
        settings=make_settings(output_dir=tmp_path, semrush_base_url="http://127.0.0.1:9"),
        broker=SimpleNamespace(ledger=lambda run_id: ledger),
        gate=gate,
    )
    monkeypatch.setattr(tasks, "current_attempt", lambda: 1)
    message = SimpleNamespace(options={})
    monkeypatch.setattr(tasks.CurrentMessage, "get_current_message", lambda: message)
    started = time.monotonic()
    with pytest.raises(Defer) as deferred:
        tasks.discover_country(ctx, ledger.run_id, "germany")
    assert time.monotonic() - started < 1, "the thread waited for the turn"
    assert 8_000 < deferred.value.delay <= 9_000
    assert deferred.value.options == {tasks.TURN_BOOKED: True}
    # Scheduled, not stuck: the reaper sees progress due at the turn.
    touched = client.zscore(ledger.k_touched, "discover:germany")
    assert touched > time.time() * 1000 + 8_000

    message.options.update(deferred.value.options)  # its next delivery, at the turn
    client.delete(NEXT_TURN, NOT_BEFORE)  # (the turns before it have passed)
    with pytest.raises(dramatiq.Retry) as retried:  # goes to Semrush at once, without booking again
        tasks.discover_country(ctx, ledger.run_id, "germany")
    assert "cannot fetch" in str(retried.value) and not isinstance(retried.value, Defer)
    assert not client.exists(NEXT_TURN)


def test_a_deferred_message_runs_again_later_without_using_a_retry():
    broker = StubBroker(middleware=[DurableRetries(max_retries=0), CurrentMessage()])
    runs: list[tuple[int, bool]] = []

    @dramatiq.actor(broker=broker, max_retries=0)
    def paced() -> None:
        options = CurrentMessage.get_current_message().options
        runs.append((options.get("retries", 0), options.get("booked", False)))
        if len(runs) == 1:
            raise Defer("later", delay=200, options={"booked": True})

    worker = dramatiq.Worker(broker, worker_timeout=50)
    worker.start()
    try:
        paced.send()
        broker.join(paced.queue_name, fail_fast=True)
        deadline = time.monotonic() + 10
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.join()
    finally:
        worker.stop()
    assert runs == [(0, False), (0, True)], "deferred once, then run with its option, no retry used"
