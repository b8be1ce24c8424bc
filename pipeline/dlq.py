"""``python -m pipeline.dlq``: list, show, requeue and purge the messages a run could not process.

Two kinds of entries, both kept in the run's Redis:

* ``dead_lettered``: a valid message that Dramatiq moved to ``dramatiq:<queue>.XQ`` (zset id -> ms)
  and ``dramatiq:<queue>.XQ.msgs`` (hash id -> encoded message). WorkerPool keeps its reason in
  ``wp:deadletters``; one that Dramatiq dead-lettered by itself (an unknown actor, a retry that
  could not be enqueued) may have none.
* ``quarantined``: a payload no worker could decode, or an oversized one, in ``wp:quarantine``
  and ``wp:quarantine:msgs`` with its raw bytes. It is not a message: it cannot be requeued,
  unless ``--force`` and its bytes turn out to be a valid Dramatiq message after all.

``requeue`` sends a copy of the message with its retries reset and undoes, in the run's ledger,
what the dead letter settled, so the job can settle again and the run completes (and writes its
summary) again. ``purge`` only deletes entries: the ledger keeps their outcome.

The latest run by default; ``--all`` for every run, and for entries that name no run. An entry
is named by its id or any unique prefix of it (``list`` shows 8 characters).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import json
import sys
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import dramatiq
import redis
from dramatiq.common import q_name
from dramatiq.errors import ActorNotFound, BrokerConnectionError

from .broker import NAMESPACE, QUARANTINE, QUARANTINE_MSGS, QUEUES
from .cli import Parser, add_common_arguments, open_run_redis, run, settings_from
from .errors import EXIT_OK, EntryNotFound, RunNotFound, UsageError
from .jobs import FetchJob
from .ledger import ACTIVE_RUNS, RunLedger, latest_run_id, now_ms
from .middleware.deadletter import DEAD_LETTERS, identify_message
from .middleware.poison import DELIVERIES
from .progress import duration
from .settings import Settings

if TYPE_CHECKING:
    from .broker import WorkerPoolBroker

PROG = "python -m pipeline.dlq"
KINDS = ("dead_lettered", "quarantined")
#: Characters of an id that ``list`` shows; any unique prefix names an entry.
SHORT_ID = 8
REASON_WIDTH = 60
#: Characters of a raw payload that ``show`` prints as text (``--json`` prints it all).
RAW_PREVIEW = 2000
#: Options of a dead message that must not follow its copy: the copy starts afresh, now.
_STALE_OPTIONS = ("traceback", "requeue_timestamp", "redis_message_id", "eta")
_CONNECTION_ERRORS = (redis.RedisError, BrokerConnectionError)


@dataclass
class Entry:
    """One dead-lettered or quarantined message, as found in Redis."""

    id: str
    kind: str
    queue: str
    at: int  #: when it was dead-lettered or quarantined (ms)
    run_id: str | None
    actor: str | None
    reason: str
    message: dramatiq.Message | None  #: None when its bytes are not a valid Dramatiq message
    decode_error: str | None
    raw: bytes | None  #: the stored bytes (for a dead letter: the encoded message)
    record: dict[str, Any] = field(default_factory=dict)  #: reason record or quarantine record
    job: FetchJob | None = None

    @property
    def short_id(self) -> str:
        return self.id[:SHORT_ID]

    @property
    def country(self) -> str | None:
        """The country of a discover_country message."""
        if self.message is None or self.message.actor_name != "discover_country":
            return None
        args = self.message.args
        return args[1] if len(args) > 1 and isinstance(args[1], str) else None

    @property
    def target(self) -> str:
        """What the message is about, for humans: a job key, a country or nothing."""
        if self.job is not None:
            return self.job.key
        return self.country or ""

    def summary(self, now: int) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "queue": self.queue,
            "actor": self.actor,
            "run_id": self.run_id,
            "job": self.job.key if self.job else None,
            "country": self.job.country if self.job else self.country,
            "at": self.at,
            "at_iso": iso(self.at),
            "age_s": max(0, (now - self.at) // 1000),
            "reason": self.reason,
            "message_id": self.message.message_id if self.message else None,
        }

    def details(self, now: int) -> dict[str, Any]:
        found = self.summary(now)
        found["message"] = _jsonable(self.message.asdict()) if self.message else None
        found["decode_error"] = self.decode_error
        found["record"] = {k: v for k, v in self.record.items() if k != "raw"}
        if self.raw is not None and (self.kind == "quarantined" or self.message is None):
            found["raw"], found["raw_encoding"] = encode_raw(self.raw)
            found["bytes"] = len(self.raw)
        return found


# --- reading ------------------------------------------------------------------------------------


class DeadLetterStore:
    """The dead-lettered and quarantined messages of one Redis."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, decode_responses=True)
        # Message bodies stay bytes: one that is not UTF-8 must still be listed, not crash us.
        self.raw_client = redis.Redis.from_url(url)

    def entries(self) -> list[Entry]:
        """Every entry, oldest first."""
        found: list[Entry] = []
        for queue in QUEUES:
            xq = xq_key(queue)
            scored = self.raw_client.zrange(xq, 0, -1, withscores=True)
            if not scored:
                continue
            ids = [member.decode("utf-8", "replace") for member, _ in scored]
            bodies = self.raw_client.hmget(xq + ".msgs", ids)
            notes = self.client.hmget(DEAD_LETTERS, ids)
            for entry_id, (_, score), body, note in zip(ids, scored, bodies, notes, strict=True):
                found.append(dead_letter_entry(entry_id, queue, int(score), body, note))
        scored = self.client.zrange(QUARANTINE, 0, -1, withscores=True)
        if scored:
            records = self.client.hmget(QUARANTINE_MSGS, [entry_id for entry_id, _ in scored])
            for (entry_id, score), text in zip(scored, records, strict=True):
                found.append(quarantined_entry(entry_id, int(score), text))
        found.sort(key=lambda entry: entry.at)
        return found

    def of_run(
        self, run_id: str, kind: str | None = None, *, among: list[Entry] | None = None
    ) -> list[Entry]:
        """The entries naming ``run_id``. Raises RunNotFound if neither the run nor any entry exists."""
        entries = [e for e in (self.entries() if among is None else among) if e.run_id == run_id]
        if not entries and not RunLedger(self.client, run_id).exists():
            raise RunNotFound(f"no run {run_id!r} in this Redis")
        return [e for e in entries if kind is None or e.kind == kind]

    def find(self, tokens: list[str]) -> list[Entry]:
        """The entries named by ids or unique id prefixes, in the order given, each once."""
        entries = self.entries()
        chosen: dict[str, Entry] = {}
        for token in tokens:
            matches = [e for e in entries if e.id == token]
            if not matches and token:
                matches = [e for e in entries if e.id.startswith(token)]
            if not matches:
                raise EntryNotFound(f"no dead-lettered or quarantined message {token!r}")
            if len(matches) > 1:
                shown = ", ".join(e.id for e in matches[:5])
                raise UsageError(f"id prefix {token!r} is ambiguous: {shown}", hint="give more characters")
            chosen.setdefault(matches[0].id, matches[0])
        return list(chosen.values())

    def forget(self, entry: Entry) -> None:
        """Delete an entry and what is kept beside it (its reason, its crash count)."""
        with self.client.pipeline() as pipe:
            if entry.kind == "dead_lettered":
                pipe.zrem(xq_key(entry.queue), entry.id)
                pipe.hdel(xq_key(entry.queue) + ".msgs", entry.id)
                pipe.hdel(DEAD_LETTERS, entry.id)
            else:
                pipe.zrem(QUARANTINE, entry.id)
                pipe.hdel(QUARANTINE_MSGS, entry.id)
            if entry.message is not None:
                pipe.hdel(DELIVERIES, entry.message.message_id)
            pipe.execute()

    def zset_key(self, entry: Entry) -> str:
        return xq_key(entry.queue) if entry.kind == "dead_lettered" else QUARANTINE


def xq_key(queue: str) -> str:
    return f"{NAMESPACE}:{queue}.XQ"


def dead_letter_entry(entry_id: str, queue: str, at: int, body: bytes | None, note: str | None) -> Entry:
    record = _json_object(note)
    message, error = decode_message(body) if body is not None else (None, "message body missing")
    run_id, job = identify_message(message) if message else (None, None)
    run_id = run_id or _text(record.get("run_id"))
    reason = _text(record.get("reason")) or _unrecorded_reason(message, body)
    actor = message.actor_name if message else _text(record.get("actor"))
    return Entry(
        entry_id, "dead_lettered", queue, at, run_id, actor, reason, message, error, body, record, job
    )


def quarantined_entry(entry_id: str, at: int, text: str | None) -> Entry:
    record = _json_object(text)
    raw = decode_raw(record)
    message, error = decode_message(raw) if raw is not None else (None, "no raw bytes kept")
    _, job = identify_message(message) if message else (None, None)
    return Entry(
        id=entry_id,
        kind="quarantined",
        queue=_text(record.get("queue")) or "?",
        at=at,
        run_id=_text(record.get("run_id")),
        actor=message.actor_name if message else None,
        reason=_text(record.get("reason")) or "(no reason recorded)",
        message=message,
        decode_error=error,
        raw=raw,
        record=record,
        job=job,
    )


def decode_message(data: bytes) -> tuple[dramatiq.Message | None, str | None]:
    """The Dramatiq message in ``data``, or why it is not one."""
    try:
        message = dramatiq.Message.decode(data)
    except dramatiq.errors.DecodeError as e:
        # The JSON encoder wraps its own DecodeError, whose message repeats the whole payload.
        cause = getattr(e.error, "error", None) or e.error
        return None, safe(f"{type(cause).__name__}: {cause}", 200)
    # Message.decode checks no types: a JSON object with the right keys is not enough.
    if not (
        isinstance(message.actor_name, str)
        and isinstance(message.queue_name, str)
        and isinstance(message.options, dict)
        and isinstance(message.kwargs, dict)
        and isinstance(message.message_id, str)
    ):
        return None, "fields of the wrong type for a Dramatiq message"
    return message, None


def decode_raw(record: dict[str, Any]) -> bytes | None:
    raw = record.get("raw")
    if not isinstance(raw, str):
        return None
    if record.get("raw_encoding") == "base64":
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            return None
    return raw.encode("utf-8", "surrogateescape")


def encode_raw(raw: bytes) -> tuple[str, str]:
    """Bytes as JSON text: UTF-8 when they are, else base64 (as the quarantine stores them)."""
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), "base64"


def _unrecorded_reason(message: dramatiq.Message | None, body: bytes | None) -> str:
    if body is None:
        return "(message body missing)"
    traceback = message.options.get("traceback") if message else None
    lines = [line for line in traceback.splitlines() if line.strip()] if isinstance(traceback, str) else []
    return f"(no reason recorded) {lines[-1].strip()}" if lines else "(no reason recorded)"


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _jsonable(value: Any) -> Any:
    """A message's fields as JSON can hold them (its args are a tuple)."""
    return json.loads(json.dumps(value, default=repr))


# --- requeue --------------------------------------------------------------------------------------


def fresh_copy(message: dramatiq.Message) -> dramatiq.Message:
    """The message again, on its canonical queue, with no retries spent and no old traceback.

    ``Message.copy`` merges options and cannot drop one, hence ``dataclasses.replace``.
    The message id stays: logs and the run's records follow the same message.
    """
    options = {k: v for k, v in message.options.items() if k not in _STALE_OPTIONS}
    options["retries"] = 0
    return dataclasses.replace(message, queue_name=q_name(message.queue_name), options=options)


def check_requeueable(entry: Entry, broker: WorkerPoolBroker, settings: Settings, *, force: bool) -> None:
    """Refuse, before anything changes, an entry whose copy could not run.

    Raises:
        UsageError: with what is wrong and what to do instead.
    """
    name = f"{entry.kind} entry {entry.short_id}"
    if entry.kind == "quarantined" and not force:
        raise UsageError(
            f"{name} cannot be requeued: a quarantined payload is not a valid message ({entry.reason})",
            hint=f"inspect it with `{PROG} show {entry.short_id}`, delete it with `purge`; "
            "--force requeues it if its raw bytes are a valid Dramatiq message",
        )
    if entry.message is None:
        raise UsageError(
            f"{name} cannot be requeued: its bytes are not a Dramatiq message ({entry.decode_error})",
            hint=f"delete it with `{PROG} purge {entry.short_id}`",
        )
    # The copy, not the stored bytes: it carries no traceback, but a new redis_message_id.
    size = len(fresh_copy(entry.message).copy(options={"redis_message_id": str(uuid.uuid4())}).encode())
    if size > settings.max_message_bytes:
        raise UsageError(
            f"{name} cannot be requeued: its {size} bytes exceed MAX_MESSAGE_BYTES "
            f"({settings.max_message_bytes}); a worker would quarantine it again",
            hint="raise MAX_MESSAGE_BYTES for the workers and this command, or purge it",
        )
    try:
        actor = broker.get_actor(entry.message.actor_name)
    except ActorNotFound:
        raise UsageError(
            f"{name} cannot be requeued: no actor {entry.message.actor_name!r}; "
            "a worker would dead-letter it again",
            hint=f"delete it with `{PROG} purge {entry.short_id}`",
        ) from None
    queue = q_name(entry.message.queue_name)
    if queue != actor.queue_name:
        raise UsageError(
            f"{name} cannot be requeued: it names queue {queue!r}, its actor consumes {actor.queue_name!r}",
            hint=f"delete it with `{PROG} purge {entry.short_id}`",
        )


def reopen(client: redis.Redis, entry: Entry) -> list[str]:
    """Undo in the run's ledger what the dead message settled, so that its copy counts again.

    * fetch_page: the job is unsettled only when its outcome is ``dead_lettered``. A job that
      settled as saved or failed since (a copy sent by the reaper, say) keeps its outcome: the
      worker then drops the copy as a duplicate, which the notes say.
    * discover_country: the country's discovery is forgotten only when it recorded a failure
      (no jobs). A successful discovery holds the country's jobs and counts: forgetting it would
      count them twice, and its copy then just stops at "already discovered".
    * If anything was undone and the run had finished, it is running again (status ``running``,
      back in ``wp:runs:active``): the reaper watches it and the summary is written again once
      the copy settles. ``finished_at`` and ``summary`` stay until then; ``finish`` overwrites them.

    The record of the dead message among the run's rejected messages is dropped: if the copy
    fails again, a new one is written.

    Returns what was done, for the user.
    """
    if not entry.run_id:
        return []
    ledger = RunLedger(client, entry.run_id)
    if not ledger.exists():
        return [f"run {entry.run_id} is not in this Redis: no ledger to update"]
    notes: list[str] = []
    undone = False
    if entry.job is not None:
        outcome = _json_object(client.hget(ledger.k_outcomes, entry.job.key)).get("outcome")
        if outcome == "dead_lettered":
            undone = ledger.unsettle(entry.job.key)
            notes.append(f"job {entry.job.key} unsettled")
        elif outcome:
            notes.append(f"job {entry.job.key} has settled as {outcome} since: the copy will be ignored")
    elif entry.country is not None:
        discovery = ledger.discovery(entry.country) or {}
        if discovery.get("status") == "failed" and not discovery.get("jobs"):
            with client.pipeline() as pipe:
                pipe.hdel(ledger.k_discovered, entry.country)
                # What record_discovery removed: the reaper watches the discovery again.
                pipe.zadd(ledger.k_touched, {f"discover:{entry.country}": now_ms()})
                pipe.execute()
            undone = True
            notes.append(f"failed discovery of {entry.country} forgotten")
    if undone and client.hget(ledger.k_meta, "status") == "finished":
        with client.pipeline() as pipe:
            pipe.hset(ledger.k_meta, "status", "running")
            pipe.sadd(ACTIVE_RUNS, entry.run_id)
            pipe.execute()
        notes.append(f"run {entry.run_id} re-opened")
    rejected_id = entry.message.message_id if entry.kind == "dead_lettered" and entry.message else entry.id
    client.hdel(ledger.k_rejected, rejected_id)
    return notes


def requeue(store: DeadLetterStore, broker: WorkerPoolBroker, entry: Entry) -> list[str]:
    """Send a copy of the entry's message and delete the entry; returns notes for the user.

    The entry is claimed first (ZREM), so two requeues cannot both send it; the ledger is
    re-opened before the send, else a fast worker would find the job settled and drop the copy.
    If the send fails the entry is put back; a re-opened job is then re-sent by the reaper.
    """
    assert entry.message is not None  # check_requeueable refused it otherwise
    zset = store.zset_key(entry)
    if not store.client.zrem(zset, entry.id):
        raise EntryNotFound(f"entry {entry.short_id} was requeued or purged meanwhile")
    try:
        notes = reopen(store.client, entry)
        # PoisonGuard counts crashes by message id: the copy must not inherit the count.
        store.client.hdel(DELIVERIES, entry.message.message_id)
        sent = broker.enqueue(fresh_copy(entry.message))
    except BaseException:
        with suppress(redis.RedisError):  # Redis being down is the error reported, not this
            store.client.zadd(zset, {entry.id: entry.at})
        raise
    store.forget(entry)
    return [f"onto {sent.queue_name}", *notes]


# --- output ---------------------------------------------------------------------------------------


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds")


def safe(text: object, width: int | None = None) -> str:
    """One line a terminal shows as is: control and other unprintable characters escaped."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    if width is not None and len(line) > width:
        line = line[: width - 3] + "..."
    return line


def render_list(entries: list[Entry], now: int, *, with_run: bool) -> list[str]:
    rows = [
        [
            e.short_id,
            e.kind,
            safe(e.queue, 12),
            safe(e.actor or "-", 20),
            *([safe(e.run_id or "no run", 32)] if with_run else []),
            safe(e.target or "-", 32),
            duration(max(0, now - e.at) / 1000),
            safe(e.reason, REASON_WIDTH),
        ]
        for e in entries
    ]
    header = ["ID", "KIND", "QUEUE", "ACTOR", *(["RUN"] if with_run else []), "TARGET", "AGE", "REASON"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def render_entry(entry: Entry, now: int) -> list[str]:
    lines = [
        f"id:          {entry.id}",
        f"kind:        {entry.kind}",
        f"queue:       {safe(entry.queue)}",
        f"actor:       {safe(entry.actor or '-')}",
        f"run:         {safe(entry.run_id or 'no run')}",
    ]
    if entry.target:
        label = "job:" if entry.job else "country:"
        lines.append(f"{label:<13}{safe(entry.target)}")
    lines += [
        f"at:          {iso(entry.at)} ({duration(max(0, now - entry.at) / 1000)} ago)",
        f"reason:      {safe(entry.reason)}",
    ]
    message = entry.message
    if message is not None:
        options = {k: v for k, v in message.options.items() if k != "traceback"}
        lines += [
            f"message_id:  {safe(message.message_id)}",
            f"retries:     {safe(message.options.get('retries', 0))}",
            f"args:        {safe(json.dumps(_jsonable(message.args)))}",
            f"kwargs:      {safe(json.dumps(_jsonable(message.kwargs)))}",
            f"options:     {safe(json.dumps(_jsonable(options)))}",
        ]
        traceback = message.options.get("traceback")
        if isinstance(traceback, str) and traceback.strip():
            lines.append("traceback:")
            lines += [f"  {safe(line)}" for line in traceback.rstrip().splitlines()]
    elif entry.decode_error:
        lines.append(f"not a message: {safe(entry.decode_error)}")
    if entry.raw is not None and (entry.kind == "quarantined" or message is None):
        text = safe(entry.raw.decode("utf-8", "backslashreplace"))
        left = len(text) - RAW_PREVIEW
        more = f" ... ({left} more characters: --json shows all)" if left > 0 else ""
        lines += [f"bytes:       {len(entry.raw)}", f"raw:         {text[:RAW_PREVIEW]}{more}"]
    return lines


# --- the commands -----------------------------------------------------------------------------


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 ok, 2 usage, 3 Redis unreachable, 7 unknown entry id or run",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="list the entries of a run (default: the latest)")
    listing.add_argument("run_id", nargs="?", help="the run (default: the latest)")
    listing.add_argument("--all", action="store_true", help="every run, and entries that name no run")
    listing.add_argument("--json", action="store_true", help="print one JSON list")

    show = commands.add_parser("show", help="show one entry in full")
    show.add_argument("id", help="an entry id, or a unique prefix of one")
    show.add_argument("--json", action="store_true", help="print one JSON object")

    for name, verb in (("requeue", "send again"), ("purge", "delete")):
        sub = commands.add_parser(name, help=f"{verb} entries, named or all of a run's")
        sub.add_argument("ids", nargs="*", metavar="ID", help="entry ids, or unique prefixes")
        sub.add_argument("--run", metavar="RUN_ID", help=f"{verb} every entry of this run")
        sub.add_argument(
            "--kind",
            choices=KINDS,
            help="with --run: only this kind (default: "
            + ("dead_lettered" if name == "requeue" else "both")
            + ")",
        )
        if name == "requeue":
            sub.add_argument(
                "--force", action="store_true", help="requeue quarantined payloads that decode as a message"
            )
        else:
            sub.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for sub in commands.choices.values():
        add_common_arguments(sub)
        sub.set_defaults(command_parser=sub)  # for check_arguments' errors, under its own name
    return parser


def check_arguments(args: argparse.Namespace) -> None:
    """What argparse cannot say: exits with code 2 and a hint on a bad combination."""
    sub: Parser = args.command_parser
    if args.command == "list" and args.all and args.run_id:
        sub.error("give a RUN_ID or --all, not both")
    if args.command in ("requeue", "purge"):
        if bool(args.ids) == bool(args.run):
            sub.error("give entry ids or --run RUN_ID (one of the two)")
        if args.kind and not args.run:
            sub.error("--kind goes with --run")


def install_broker(settings: Settings) -> WorkerPoolBroker:
    """The broker with WorkerPool's actors declared, as a worker has it."""
    from .broker import install  # noqa: PLC0415 - only requeue needs the broker and actors

    broker = install(settings)
    import actors  # noqa: F401, PLC0415 - declares the actors on the broker installed above

    return broker


def cmd_list(store: DeadLetterStore, args: argparse.Namespace) -> int:
    now = now_ms()
    everything = store.entries()
    if args.all:
        run_id = None
        entries = everything
    else:
        try:
            run_id = args.run_id or latest_run_id(store.client)
        except RunNotFound as e:
            raise RunNotFound(str(e), hint=f"`{PROG} list --all` lists entries that name no run") from None
        entries = store.of_run(run_id, among=everything)
    if args.json:
        print(json.dumps([e.summary(now) for e in entries]))
        return EXIT_OK
    scope = "any run" if run_id is None else f"run {run_id}"
    if not entries:
        print(f"no dead-lettered or quarantined messages for {scope}")
    else:
        counts = ", ".join(f"{sum(e.kind == k for e in entries)} {k}" for k in KINDS)
        print(f"{scope}: {counts}")
        print("\n".join(render_list(entries, now, with_run=run_id is None)))
    if run_id is not None:
        others = len(everything) - len(entries)
        if others:
            print(f"({others} more in other runs or in no run: `{PROG} list --all`)")
    return EXIT_OK


def cmd_show(store: DeadLetterStore, args: argparse.Namespace) -> int:
    (entry,) = store.find([args.id])
    now = now_ms()
    if args.json:
        print(json.dumps(entry.details(now)))
    else:
        print("\n".join(render_entry(entry, now)))
    return EXIT_OK


def selected(store: DeadLetterStore, args: argparse.Namespace, default_kind: str | None) -> list[Entry]:
    if args.ids:
        return store.find(args.ids)
    return store.of_run(args.run, args.kind or default_kind)


def cmd_requeue(store: DeadLetterStore, args: argparse.Namespace, settings: Settings, embedded: bool) -> int:
    if args.run and args.kind == "quarantined" and not args.force:
        raise UsageError(
            "quarantined payloads are not valid messages and cannot be requeued",
            hint="--force requeues those whose raw bytes are a valid Dramatiq message",
        )
    entries = selected(store, args, "dead_lettered")
    if not entries:
        print(f"nothing to requeue in run {args.run}")
        return EXIT_OK
    broker = install_broker(settings)
    for entry in entries:  # all checked before any is sent
        check_requeueable(entry, broker, settings, force=args.force)
    for entry in entries:
        notes = requeue(store, broker, entry)
        print(
            f"requeued {entry.short_id} ({safe(entry.actor)} {safe(entry.target)}".rstrip()
            + "): "
            + "; ".join(notes)
        )
    print(f"requeued {len(entries)} message(s)")
    if embedded:
        print("note: no worker uses this embedded Redis now: the messages run when workers next start on it")
    return EXIT_OK


def cmd_purge(store: DeadLetterStore, args: argparse.Namespace) -> int:
    entries = selected(store, args, None)
    if not entries:
        print(f"nothing to purge in run {args.run}")
        return EXIT_OK
    counts = ", ".join(f"{n} {k}" for k in KINDS if (n := sum(e.kind == k for e in entries)))
    what = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({counts})"
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"refusing to purge {what} without confirmation", hint="add --yes")
        try:
            answer = input(f"delete {what} for good? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing purged")
            return EXIT_OK
    for entry in entries:
        store.forget(entry)
    print(f"purged {what}")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(args)
    with open_run_redis(settings_from(args)) as (settings, embedded):
        store = DeadLetterStore(settings.redis_url)
        if args.command == "list":
            return cmd_list(store, args)
        if args.command == "show":
            return cmd_show(store, args)
        if args.command == "requeue":
            return cmd_requeue(store, args, settings, embedded is not None)
        return cmd_purge(store, args)


if __name__ == "__main__":
    run(main)
