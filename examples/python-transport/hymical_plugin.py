"""What a Hymical transport plugin in Python needs besides its send function.

serve() does go-plugin's side (the magic cookie, protocol negotiation,
AutoMTLS, the one handshake line on stdout, the health and controller
services, hclog JSON logs on stderr, an exit when the host asks or goes
away) and serves Hymical's Transport service, protocols 1 and 2, over the
functions given. It is the Python twin of sdk/node-plugin, on Debian's
python3-grpcio, python3-protobuf and python3-cryptography only;
docs/plugins-other-languages.md says what each step is for.
"""

import base64
import concurrent.futures
import datetime
import json
import os
import queue
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "gen"))

import grpc  # noqa: E402
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

import goplugin_pb2  # noqa: E402
import goplugin_pb2_grpc  # noqa: E402
import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402
import transport_pb2 as pb  # noqa: E402
import transport_pb2_grpc  # noqa: E402

# As sdk/transport/handshake.go sets them.
MAGIC_COOKIE = ("HYMICAL_TRANSPORT_PLUGIN", "6f1d0c8e4b2a4f7fa3c1d9e85b7a2c40")
PROTOCOL_VERSIONS = (1, 2)
# sdk/transport's MaxErrorBytes: the host cuts longer error text too.
MAX_ERROR_BYTES = 1024
# How often the plugin checks that its host is still its parent.
PARENT_CHECK_SECONDS = 1.0


class Outcome:
    """An attempt's result; build one with the functions below."""

    def __init__(self, kind, status_code=0, error="", retry_after=0.0, no_request=False):
        self.kind, self.status_code, self.error = kind, status_code, error
        self.retry_after, self.no_request = retry_after, no_request


def delivered(status_code=0):
    return Outcome(pb.OUTCOME_KIND_DELIVERED, status_code)


def retryable(status_code, reason, retry_after=0.0):
    """A try that failed in a way another may fix; it spends one attempt."""
    return Outcome(pb.OUTCOME_KIND_RETRYABLE, status_code, reason, retry_after)


def permanent(status_code, reason):
    return Outcome(pb.OUTCOME_KIND_PERMANENT, status_code, reason)


def refused(reason):
    """Nothing went out and no retry will help: no attempt is counted."""
    return Outcome(pb.OUTCOME_KIND_PERMANENT, 0, reason, no_request=True)


def deferred(reason):
    """Nothing went out, for a passing reason: tried again, not counted."""
    return Outcome(pb.OUTCOME_KIND_RETRYABLE, 0, reason, no_request=True)


def bound_error(text):
    """Error text as sdk/boundtext makes it: no NUL, valid UTF-8, bounded."""
    b = str(text or "").replace("\0", "").encode("utf-8", "replace")
    if len(b) <= MAX_ERROR_BYTES:
        return b.decode("utf-8")
    return b[: MAX_ERROR_BYTES - 3].decode("utf-8", "ignore") + "…"


class Log:
    """hclog's JSON lines on stderr, which the host parses. Never log a
    message's headers or body: the headers carry its signature."""

    def __init__(self):
        self._lock = threading.Lock()

    def _write(self, level, message, fields):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = json.dumps({**fields, "@level": level, "@message": message, "@timestamp": now})
        with self._lock:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def debug(self, message, **fields):
        self._write("debug", message, fields)

    def info(self, message, **fields):
        self._write("info", message, fields)

    def error(self, message, **fields):
        self._write("error", message, fields)


class Message:
    """One attempt, as the host hands it over."""

    def __init__(self, req, traceparent, tracestate):
        self.delivery_id, self.attempt = req.delivery_id, req.attempt
        self.url, self.config = req.endpoint.url, dict(req.endpoint.config)
        self.headers = [(h.name, h.value) for h in req.headers]  # exact, in order
        self.body = bytes(req.body)  # the exact signed bytes
        self.deadline = req.deadline.seconds + req.deadline.nanos / 1e9 if req.HasField("deadline") else None
        self.traceparent, self.tracestate = traceparent, tracestate


def _self_signed_cert():
    """A certificate as go-plugin's own generateCert makes one: for the DNS
    name localhost (the host checks it), a CA (the host trusts this very
    certificate), server and client auth."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Hymical transport plugin"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.DER), cert.public_bytes(serialization.Encoding.PEM), key_pem


class _Transport(transport_pb2_grpc.TransportServicer):
    def __init__(self, plugin, log, pool):
        self.plugin, self.log, self.pool = plugin, log, pool

    def Configure(self, request, context):
        settings = dict(request.settings)
        try:
            if self.plugin.get("configure"):
                self.plugin["configure"](settings)
            elif settings:
                raise ValueError("unknown settings %s: this plugin takes none" % ", ".join(sorted(settings)))
        except Exception as err:  # a refusal is an answer, not a failed call
            return pb.ConfigureResponse(error=bound_error(err) or "refused without a reason")
        return pb.ConfigureResponse()

    def Validate(self, request, context):
        try:
            if self.plugin.get("validate"):
                self.plugin["validate"](request.endpoint.url, dict(request.endpoint.config))
        except Exception as err:
            return pb.ValidateResponse(error=bound_error(err) or "refused without a reason")
        return pb.ValidateResponse()

    def _run(self, req, traceparent, tracestate, cancelled):
        """One attempt. The answer goes at the deadline (or on a cancel)
        whether or not the send function has returned: the host kills a
        plugin that has not answered within its grace as hung."""
        msg = Message(req, traceparent, tracestate)
        left = None if msg.deadline is None else msg.deadline - time.time()
        if left is not None and left <= 0:
            return _to_proto(retryable(0, "the attempt's deadline passed before it started"))
        future = self.pool.submit(self.plugin["send"], msg, cancelled)
        end = None if left is None else time.monotonic() + left
        while True:
            wait = 0.05 if end is None else max(0.0, min(0.05, end - time.monotonic()))
            try:
                return _to_proto(future.result(timeout=wait))
            except concurrent.futures.TimeoutError:
                pass
            except Exception as err:  # a bug in the plugin: a request may have gone out
                self.log.error("send failed", delivery_id=msg.delivery_id, attempt=msg.attempt, error=str(err))
                return _to_proto(retryable(0, "the plugin failed: %s" % err))
            if end is not None and time.monotonic() >= end:
                cancelled.set()
                return _to_proto(retryable(0, "the send had not ended when the attempt's deadline passed"))
            if cancelled.is_set():
                return _to_proto(retryable(0, "the host canceled the attempt"))

    def Send(self, request, context):  # protocol 1
        md = dict(context.invocation_metadata())
        cancelled = threading.Event()
        context.add_callback(cancelled.set)
        return self._run(request, md.get("traceparent", ""), md.get("tracestate", ""), cancelled)

    def SendStream(self, request_iterator, context):  # protocol 2
        replies = queue.Queue()
        running, lock = {}, threading.Lock()

        def one(rid, send, cancelled):
            outcome = self._run(send, send.traceparent, send.tracestate, cancelled)
            with lock:
                running.pop(rid, None)
            replies.put(pb.SendStreamReply(id=rid, outcome=outcome))

        def read():
            try:
                for req in request_iterator:
                    with lock:
                        if req.cancel:
                            if req.id in running:
                                running[req.id].set()
                            continue
                        cancelled = running[req.id] = threading.Event()
                    threading.Thread(target=one, args=(req.id, req.send, cancelled), daemon=True).start()
            finally:
                with lock:  # the stream ended: every send on it is over
                    for ev in running.values():
                        ev.set()
                replies.put(None)

        threading.Thread(target=read, daemon=True).start()
        while True:
            reply = replies.get()
            if reply is None:
                return
            yield reply


def _to_proto(o):
    out = pb.Outcome(kind=o.kind, status_code=max(0, int(o.status_code or 0)), error=bound_error(o.error),
                     no_request=bool(o.no_request) and o.kind != pb.OUTCOME_KIND_DELIVERED)
    if o.retry_after and o.retry_after > 0:
        out.retry_after.FromNanoseconds(int(o.retry_after * 1e9))
    return out


class _Health(health_pb2_grpc.HealthServicer):
    def Check(self, request, context):
        if request.service in ("", "plugin"):
            return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
        context.abort(grpc.StatusCode.NOT_FOUND, "unknown service %s" % request.service)


class _Controller(goplugin_pb2_grpc.GRPCControllerServicer):
    def __init__(self, stop):
        self.stop = stop

    def Shutdown(self, request, context):
        # Answer first, then exit: the host waits two seconds for the exit.
        threading.Thread(target=self.stop, args=("the host asked the plugin to shut down",), daemon=True).start()
        return goplugin_pb2.Empty()


def serve(name, send, validate=None, configure=None):
    """Serve the plugin until the host stops it; never returns.

    send(message, cancelled) returns an Outcome; cancelled is a
    threading.Event set at the deadline or when the host cancels.
    validate(url, config) and configure(settings) raise to refuse."""
    log = Log()
    env = os.environ
    if env.get(MAGIC_COOKIE[0]) != MAGIC_COOKIE[1]:
        sys.stderr.write("%s is a Hymical transport plugin: the Hymical server starts it, it is not meant to be run by hand.\n" % name)
        sys.exit(1)
    host_versions = {int(v) for v in env.get("PLUGIN_PROTOCOL_VERSIONS", "").split(",") if v.strip().isdigit()}
    common = sorted(host_versions & set(PROTOCOL_VERSIONS))
    version = common[-1] if common else min(PROTOCOL_VERSIONS)
    client_cert = env.get("PLUGIN_CLIENT_CERT")
    if not client_cert:
        log.error("PLUGIN_CLIENT_CERT is not set: this plugin serves only over the mutual TLS a Hymical host sets up (go-plugin AutoMTLS)")
        sys.exit(1)
    der, cert_pem, key_pem = _self_signed_cert()
    creds = grpc.ssl_server_credentials([(key_pem, cert_pem)], root_certificates=client_cert.encode(), require_client_auth=True)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=64)
    # grpc binds with SO_REUSEPORT unless told not to: two plugins started
    # at once would then both take the first port of the host's range, and
    # the host's connection could reach the other one, whose certificate
    # is not the one this handshake names.
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=32),
                         options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20),
                                  ("grpc.so_reuseport", 0)])

    def stop(why):
        log.info("stopping", reason=why)
        server.stop(1).wait()
        # os._exit, not sys.exit: a send stuck in a system call must not
        # keep the process from exiting when the host asks.
        os._exit(0)

    transport_pb2_grpc.add_TransportServicer_to_server(
        _Transport({"send": send, "validate": validate, "configure": configure}, log, pool), server)
    health_pb2_grpc.add_HealthServicer_to_server(_Health(), server)
    goplugin_pb2_grpc.add_GRPCControllerServicer_to_server(_Controller(stop), server)
    lo, hi = int(env.get("PLUGIN_MIN_PORT") or 0), int(env.get("PLUGIN_MAX_PORT") or 0)
    port = 0
    for candidate in (range(lo, hi + 1) if lo and hi else [0]):
        try:
            port = server.add_secure_port("127.0.0.1:%d" % candidate, creds)
        except RuntimeError:
            port = 0
        if port:
            break
    if not port:
        log.error("cannot listen on 127.0.0.1", min_port=lo, max_port=hi)
        sys.exit(1)
    server.start()
    # The handshake line, the only thing written to stdout; the
    # certificate's DER in base64 without padding, as Go's RawStdEncoding.
    cert_field = base64.b64encode(der).decode().rstrip("=")
    sys.stdout.write("1|%d|tcp|127.0.0.1:%d|grpc|%s\n" % (version, port, cert_field))
    sys.stdout.flush()
    log.debug("serving", protocol=version, address="127.0.0.1:%d" % port)
    # As go-plugin's Go plugins do: a Ctrl-C reaches the whole foreground
    # process group, and the host decides when its plugins stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop, args=("SIGTERM",), daemon=True).start())
    parent = os.getppid()
    while True:
        time.sleep(PARENT_CHECK_SECONDS)
        if os.getppid() != parent:
            stop("the host process is gone")
