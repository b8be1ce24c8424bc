"""Local HTTP servers that misbehave on purpose, for tests of the download path.

A :class:`HostileServer` listens on 127.0.0.1 (a free port) and answers each request with the
*handler* routed by its path. Handlers are plain functions ``handler(conn, request, server)``
that write to the raw socket, so they can do what no well-behaved server library allows:
never answer, trickle, send forever, reset mid-body. A handler returns True to keep the
connection open for the next request (keep-alive), False to close it.

    with HostileServer({"/": page(b"<html>hi</html>"), "/slow": trickle()}) as server:
        server.url("/slow")

The server always stops on leaving the ``with`` block: client sockets are shut down, so handlers
blocked on them or sleeping on ``server.stopped`` return at once.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType

_BLOCK = b"x" * 65536


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[socket.socket, Request, "HostileServer"], bool]
OnAccept = Callable[[socket.socket, "HostileServer"], bool]


class HostileServer:
    def __init__(self, routes: Mapping[str, Handler], *, on_accept: OnAccept | None = None) -> None:
        self.routes = dict(routes)
        #: Runs first on each new connection (to talk before the client does, e.g. to break TLS);
        #: returns whether to go on and serve HTTP requests.
        self.on_accept = on_accept
        self.stopped = threading.Event()
        self.connections = 0  # accepted so far (to see keep-alive at work)
        self.requests: list[Request] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        # stop() wakes accept() by shutting the listener down; the timeout is only a fallback.
        self._listener.settimeout(0.5)
        self.port = self._listener.getsockname()[1]
        self._clients: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> HostileServer:
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with self._lock:
            clients = list(self._clients)
        for conn in clients:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(timeout=5)
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._clients.add(conn)
                self.connections += 1
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        try:
            if self.on_accept is not None and not self.on_accept(conn, self):
                return
            while not self.stopped.is_set():
                request = _read_request(conn, buffer)
                if request is None:
                    return
                self.requests.append(request)
                handler = self.routes.get(request.path.partition("?")[0], not_found)
                if not handler(conn, request, self):
                    return
        except OSError:
            pass  # the client went away: that is what hostile tests do
        finally:
            with self._lock:
                self._clients.discard(conn)
            conn.close()


def _read_request(conn: socket.socket, buffer: bytearray) -> Request | None:
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest  # GET requests have no body
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers)


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# --- well-behaved answers -----------------------------------------------------------------------


def respond(status: int = 200, body: bytes = b"", headers: Mapping[str, str | None] | None = None) -> Handler:
    """A complete answer with Content-Length; the connection stays open (keep-alive).

    ``headers`` add to (or, with a None value, remove) the default ``Content-Type: text/html``.
    """
    merged = {"Content-Type": "text/html; charset=utf-8", **(headers or {})}
    sent = {name: value for name, value in merged.items() if value is not None}
    data = _head(status, {**sent, "Content-Length": str(len(body))}) + body

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        conn.sendall(data)
        return True

    return handler


def page(
    body: bytes = b"<!doctype html><title>ok</title><p>hello</p>", content_type: str | None = None
) -> Handler:
    """A 200 page. ``content_type=None`` keeps text/html; ``""`` sends no Content-Type at all."""
    return respond(200, body, {} if content_type is None else {"Content-Type": content_type or None})


def gzip_page(body: bytes) -> Handler:
    compressor = zlib.compressobj(wbits=31)  # 31: gzip container
    return respond(200, compressor.compress(body) + compressor.flush(), {"Content-Encoding": "gzip"})


def redirect(location: str, status: int = 302) -> Handler:
    return respond(status, b"", {"Location": location})


not_found = respond(404, b"<h1>not found</h1>")


# --- hostile answers ----------------------------------------------------------------------------


def silent() -> Handler:
    """Accept, read the request, never answer."""

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        server.stopped.wait()
        return False

    return handler


def trickle(interval: float = 0.5, *, headers_too: bool = False) -> Handler:
    """Send one byte every ``interval`` seconds, of the body (or of the status line as well)."""

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        if not headers_too:
            conn.sendall(_head(200, {"Content-Type": "text/html", "Content-Length": "100000"}))
        data = b"HTTP/1.1 200 OK\r\n" if headers_too else b"<" * 100000
        for i in range(len(data)):
            conn.sendall(data[i : i + 1])
            if server.stopped.wait(interval):
                break
        return False

    return handler


def endless(*, chunked: bool = True) -> Handler:
    """A body that never ends: chunked, or delimited by the close that never comes."""

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        headers = {"Content-Type": "text/html"}
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
        conn.sendall(_head(200, headers))
        piece = b"%x\r\n%s\r\n" % (len(_BLOCK), _BLOCK) if chunked else _BLOCK
        while not server.stopped.is_set():
            conn.sendall(piece)
        return False

    return handler


def oversized(size: int, *, content_length: bool) -> Handler:
    """A body of ``size`` bytes, announced by Content-Length or delimited by closing."""

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        headers = {"Content-Type": "text/html"}
        if content_length:
            headers["Content-Length"] = str(size)
        conn.sendall(_head(200, headers))
        sent = 0
        while sent < size and not server.stopped.is_set():
            conn.sendall(_BLOCK[: size - sent])
            sent += len(_BLOCK)
        return False

    return handler


def gzip_bomb(decoded_size: int = 100 * 1024 * 1024) -> Handler:
    """``decoded_size`` zeros, gzip-compressed as they are sent (about 1000:1; never in memory)."""
    zeros = bytes(1024 * 1024)

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        conn.sendall(_head(200, {"Content-Type": "text/html", "Content-Encoding": "gzip"}))
        compressor = zlib.compressobj(9, wbits=31)
        for _ in range(decoded_size // len(zeros)):
            if server.stopped.is_set():
                return False
            conn.sendall(compressor.compress(zeros))
        conn.sendall(compressor.flush())
        return False

    return handler


def reset_mid_body(sent: int = 1000, announced: int = 100_000) -> Handler:
    """Announce ``announced`` bytes, send ``sent``, then reset the connection (TCP RST)."""

    def handler(conn: socket.socket, request: Request, server: HostileServer) -> bool:
        conn.sendall(_head(200, {"Content-Type": "text/html", "Content-Length": str(announced)}))
        conn.sendall(b"<" * sent)
        # A zero linger makes close() send RST instead of FIN.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return False

    return handler


# --- talking first ------------------------------------------------------------------------------


def banner(data: bytes) -> OnAccept:
    """Send ``data`` on connecting, then hang up (plain bytes where a TLS handshake is due)."""

    def on_accept(conn: socket.socket, server: HostileServer) -> bool:
        conn.sendall(data)
        return False

    return on_accept


def trickle_tls_handshake(interval: float = 0.3) -> OnAccept:
    """Answer a TLS ClientHello with the start of a ServerHello record, one byte at a time."""
    record = b"\x16\x03\x03\x00\x40" + b"\x02" + b"\x00" * 63  # handshake record, 64-byte body

    def on_accept(conn: socket.socket, server: HostileServer) -> bool:
        conn.recv(65536)
        for i in range(len(record)):
            conn.sendall(record[i : i + 1])
            if server.stopped.wait(interval):
                break
        return False

    return on_accept
