"""The parameter-server channel on gRPC: one server per task, one channel per peer.

Every call is one unary gRPC method, ``/distrib.ps.PS/Call``, whose request
is ``encode((handler_name, args))`` (`distrib.strategies.parameter_server.wire`) and whose
reply is ``encode(("ok", value))`` or ``encode(("raised", text))``. The
server runs only handlers registered for its task by name (it never
unpickles a function), on its thread pool.

Requests and replies are in the closed encoding of
`distrib.strategies.parameter_server.wire`, which never unpickles.

Authentication (`distrib.strategies.parameter_server.auth`): with a job secret every
request carries a per-call token in its metadata, signed for this task and
method. A server interceptor checks the token on the metadata alone, before
any byte of the request is read, and refuses a bad one (``UNAUTHENTICATED``)
with a handler that never reads the request: a stranger's call holds no
handler thread and no memory, however large a message it announces or however
long it stalls. The body is then checked against the token's digest. Replies
are sealed, and the caller refuses a reply whose seal does not check.
Messages are limited to ``DISTRIB_PS_MAX_MESSAGE_BYTES`` (default 1 GiB) in
both directions, and a connection to at most 64 concurrent calls.

TLS (optional, `tls_from_env`): ``DISTRIB_TLS_CERT`` and ``DISTRIB_TLS_KEY``
(PEM files) make every server serve TLS and every channel use it, with
``DISTRIB_TLS_CA`` as the trusted root (default: the certificate itself, the
usual self-signed job certificate) and client certificates required
(mutual TLS). ``DISTRIB_TLS_SERVER_NAME`` overrides the name checked against
the certificate when it does not name the hosts of ``TF_CONFIG``.

Example:
    >>> server = Server("127.0.0.1", {"echo": lambda x: x}, auth=None, tls=None, threads=4, name="ps:0")
    >>> channel = Channel(f"127.0.0.1:{server.port}", auth=None, tls=None, dest="ps:0")
    >>> channel.call_async("echo", (5,), timeout=10).wait()
    5
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import grpc
import torch

from distrib.strategies.parameter_server import wire as ps_wire
from distrib.strategies.parameter_server.auth import DEST_HEADER, TOKEN_HEADER, CallAuth
from distrib.strategies.parameter_server.errors import ChannelConfigError, ChannelError, PeerError
from distrib.strategies.parameter_server.serving_pool import ServingPool

__all__ = ["METHOD", "TlsConfig", "tls_from_env", "max_message_bytes", "Server", "Channel"]

METHOD = "/distrib.ps.PS/Call"
_MAX_MESSAGE_ENV = "DISTRIB_PS_MAX_MESSAGE_BYTES"
_STREAMS_PER_CONNECTION = 64


def max_message_bytes(environ: Optional[Mapping[str, str]] = None) -> int:
    """The largest request or reply of the channel: ``DISTRIB_PS_MAX_MESSAGE_BYTES``, default 1 GiB."""
    text = (os.environ if environ is None else environ).get(_MAX_MESSAGE_ENV, "")
    if not text:
        return 1 << 30
    if not text.isdigit() or not 1 <= int(text) < (1 << 31):
        raise ChannelConfigError(f"{_MAX_MESSAGE_ENV}={text!r}: give a byte count from 1 to {(1 << 31) - 1}")
    return int(text)


def _options() -> list:
    limit = max_message_bytes()
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit),
            ("grpc.max_concurrent_streams", _STREAMS_PER_CONNECTION)]


class _Gate(grpc.ServerInterceptor):
    """Refuses a call whose token does not check, from its metadata, without reading its request."""

    def __init__(self, auth: CallAuth, name: str) -> None:
        self._auth = auth
        self._name = name

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        if details.method != METHOD:
            return None  # UNIMPLEMENTED, answered without reading the request
        metadata = dict(details.invocation_metadata or ())
        token, signed_for = metadata.get(TOKEN_HEADER), metadata.get(DEST_HEADER)
        why = self._auth.check_header(METHOD, self._name, token if isinstance(token, str) else None,
                                      signed_for if isinstance(signed_for, str) else None)
        if why is None:
            return continuation(details)
        message = f"distrib: call refused by {self._name}: {why}"
        # A streaming-request handler is called before any request message is read.
        return grpc.stream_unary_rpc_method_handler(
            lambda requests, context: context.abort(grpc.StatusCode.UNAUTHENTICATED, message))
_TLS_VARS = ("DISTRIB_TLS_CERT", "DISTRIB_TLS_KEY", "DISTRIB_TLS_CA")


@dataclass(frozen=True)
class TlsConfig:
    """PEM bytes of this task's certificate and key and of the trusted root."""

    cert: bytes
    key: bytes
    ca: bytes
    server_name: Optional[str] = None


def _read_pem(var: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ChannelConfigError(f"{var}={path}: cannot read it ({exc.strerror}); point {var} at a "
                                 f"PEM file this task can read") from None
    if b"-----BEGIN" not in data:
        raise ChannelConfigError(f"{var}={path}: not a PEM file (no '-----BEGIN' line); give a "
                                 f"PEM-encoded certificate or key")
    return data


def tls_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[TlsConfig]:
    """The TLS settings from ``DISTRIB_TLS_*``, or None when TLS is off.

    Raises:
        ChannelConfigError: only one of the certificate and key is set, or a file cannot be read.
    """
    env = os.environ if environ is None else environ
    cert, key, ca = (env.get(v) or None for v in _TLS_VARS)
    if cert is None and key is None:
        if ca is not None:
            raise ChannelConfigError("DISTRIB_TLS_CA is set but DISTRIB_TLS_CERT and DISTRIB_TLS_KEY "
                                     "are not: set all of them (or none, for no TLS)")
        return None
    if cert is None or key is None:
        missing = "DISTRIB_TLS_KEY" if key is None else "DISTRIB_TLS_CERT"
        raise ChannelConfigError(f"{missing} is not set but the other half of the key pair is: set "
                                 f"both DISTRIB_TLS_CERT and DISTRIB_TLS_KEY (or neither)")
    cert_pem = _read_pem("DISTRIB_TLS_CERT", cert)
    return TlsConfig(cert_pem, _read_pem("DISTRIB_TLS_KEY", key),
                     _read_pem("DISTRIB_TLS_CA", ca) if ca else cert_pem,
                     env.get("DISTRIB_TLS_SERVER_NAME") or None)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Server:
    """This task's gRPC server, running ``handlers`` (name → function) for authenticated callers.

    A handler may return a ``torch.futures.Future``; the reply is its value.

    Args:
        host: the address to bind (this task's ``TF_CONFIG`` host); the port is chosen free.
        handlers: what callers may run, by name.
        auth: checks each call's token; None serves unauthenticated.
        tls: serve TLS with these credentials; None serves plain TCP.
        threads: the size of the handler thread pool.
        name: this task (``"ps:0"``); calls must be signed for it.
    """

    def __init__(self, host: str, handlers: Dict[str, Callable[..., Any]], auth: Optional[CallAuth],
                 tls: Optional[TlsConfig], threads: int, name: str) -> None:
        self._handlers = dict(handlers)
        self._auth = auth
        self._pool = ServingPool(max_workers=threads, name="distrib-ps")  # serves until stop, exit included
        self._server = grpc.server(self._pool,
                                   handlers=[grpc.method_handlers_generic_handler("distrib.ps.PS", {
                                       "Call": grpc.unary_unary_rpc_method_handler(self._call)})],
                                   interceptors=[_Gate(auth, name)] if auth is not None else None,
                                   options=_options())
        target = f"{_bracket(host)}:0"
        if tls is None:
            self.port = self._server.add_insecure_port(target)
        else:
            creds = grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca,
                                                require_client_auth=True)
            self.port = self._server.add_secure_port(target, creds)
        if not self.port:
            raise ChannelError(f"cannot serve the parameter-server channel on {host}: no port could be "
                               f"bound (is {host} an address of this machine?)", "UNAVAILABLE")
        self._server.start()

    def _call(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        nonce = ""
        if self._auth is not None:  # the token itself was checked by `_Gate` before this read
            token = str(dict(context.invocation_metadata()).get(TOKEN_HEADER))
            why = self._auth.check_body(token, request)
            if why is not None:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, f"distrib: call refused: {why}")
            nonce = CallAuth.nonce_of(token)
        try:
            name, args = ps_wire.decode(request)
            handler = self._handlers[name]
        except Exception as exc:  # noqa: BLE001 - an authenticated but malformed call
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"distrib: bad call: {type(exc).__name__}: {exc}")
        try:
            value = handler(*args)
            if isinstance(value, torch.futures.Future):
                value = value.wait()
            body = ps_wire.encode(("ok", value))
        except Exception as exc:  # noqa: BLE001 - goes back to the caller
            body = ps_wire.encode(("raised", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return body if self._auth is None else self._auth.seal_reply(nonce, body)

    def stop(self, grace: float) -> None:
        """Stop serving; calls in progress get ``grace`` seconds to finish."""
        self._server.stop(grace).wait(grace + 1.0)
        self._pool.shutdown(wait=False)


class Channel:
    """Calls to one peer's `Server`.

    Args:
        address: ``host:port`` of the peer's server.
        auth: signs calls and checks replies; None for an unauthenticated job.
        tls: use TLS with these credentials; None for plain TCP.
        dest: the peer task (``"ps:0"``) its calls are signed for.
    """

    def __init__(self, address: str, auth: Optional[CallAuth], tls: Optional[TlsConfig], dest: str) -> None:
        self._auth = auth
        self._dest = dest
        if tls is None:
            self._channel = grpc.insecure_channel(address, options=_options())
        else:
            creds = grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key,
                                                 certificate_chain=tls.cert)
            extra = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
            self._channel = grpc.secure_channel(address, creds, options=_options() + extra)
        self._stub = self._channel.unary_unary(METHOD)

    def call_async(self, name: str, args: Sequence[Any], timeout: Optional[float]) -> torch.futures.Future:
        """Run handler ``name`` with ``args`` on the peer; ``timeout`` None (or 0) waits forever.

        The future fails with `ChannelError` (transport, refusal, deadline) or `PeerError`
        (the handler raised).
        """
        request = ps_wire.encode((name, tuple(args)))
        metadata = None
        nonce = ""
        if self._auth is not None:
            token = self._auth.sign(METHOD, self._dest, request)
            nonce = CallAuth.nonce_of(token)
            metadata = ((TOKEN_HEADER, token), (DEST_HEADER, self._dest))
        result: torch.futures.Future = torch.futures.Future()
        call = self._stub.future(request, timeout=timeout or None, metadata=metadata)
        call.add_done_callback(lambda done: self._complete(done, nonce, result))
        return result

    def _complete(self, call: Any, nonce: str, result: torch.futures.Future) -> None:
        try:
            sealed = call.result()
        except grpc.RpcError as exc:
            code = exc.code()
            name = code.name if code is not None else "UNKNOWN"
            result.set_exception(ChannelError(f"{name}: {exc.details() or ''}".strip(), name))
            return
        except Exception as exc:  # noqa: BLE001 - e.g. cancelled at shutdown
            result.set_exception(ChannelError(f"{type(exc).__name__}: {exc}", "CANCELLED"))
            return
        body = sealed if self._auth is None else self._auth.open_reply(nonce, sealed)
        if body is None:
            result.set_exception(ChannelError("job secret mismatch: the reply is not signed with this "
                                              "job's key (a different DISTRIB_JOB_SECRET, or not a "
                                              "task of this job)", "UNAUTHENTICATED"))
            return
        try:
            reply = ps_wire.decode(body)
        except Exception as exc:  # noqa: BLE001
            result.set_exception(ChannelError(f"undecodable reply: {exc}", "DATA_LOSS"))
            return
        if reply[0] == "ok":
            result.set_result(reply[1])
        else:
            result.set_exception(PeerError(reply[1]))

    def close(self) -> None:
        self._channel.close()
