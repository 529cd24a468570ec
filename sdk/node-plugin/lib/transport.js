'use strict';

// The Hymical transport service (proto/transport.proto, a copy of
// sdk/transport/proto/transport.proto) over an implementation written as
// plain async functions, as sdk/transport's grpc.go and stream.go serve it
// for Go plugins. Each gets { log } as its last argument, and send also
// { signal }:
//
//   configure(settings)       throws to refuse the plugin-wide settings;
//                             optional: without it, any setting is refused
//   validate(endpoint)        throws to refuse an endpoint, saying why;
//                             optional: without it, every endpoint passes
//   send(message, {signal})   resolves to an outcome (see the helpers below);
//                             signal aborts at the attempt's deadline, when
//                             the host cancels it, or when its stream ends
//
// A refusal is an answer (the error field), never a failed call: the host
// must be able to tell a plugin that said no from one that is broken.

const { loadProto } = require('./goplugin');

// The protocol versions this plugin speaks. 1: one unary Send per attempt.
// 2: every attempt on one long-lived SendStream. Both are served whichever
// the host picks, as the proto asks.
const PROTOCOL_VERSIONS = [1, 2];

// The magic cookie, as sdk/transport/handshake.go sets it.
const MAGIC_COOKIE = { key: 'HYMICAL_TRANSPORT_PLUGIN', value: '6f1d0c8e4b2a4f7fa3c1d9e85b7a2c40' };

// MaxErrorBytes in sdk/transport: the host cuts longer error text too.
const MAX_ERROR_BYTES = 1024;

// sdk/transport's MaxConcurrentSends: the sends one stream runs at once.
// Past it the plugin stops reading the stream, and further requests wait
// in gRPC flow control, as they do with a Go plugin.
const MAX_CONCURRENT_SENDS = 1024;

// boundError makes error text safe to carry, as sdk/boundtext does: no NUL
// bytes, valid UTF-8, at most MAX_ERROR_BYTES, cut on a character boundary
// with an ellipsis.
function boundError(text) {
  const s = String(text ?? '').replace(/\0/g, '');
  const b = Buffer.from(s, 'utf8'); // lone surrogates become U+FFFD
  if (b.length <= MAX_ERROR_BYTES) return b.toString('utf8');
  const ellipsis = '…';
  let cut = MAX_ERROR_BYTES - Buffer.byteLength(ellipsis);
  while (cut > 0 && (b[cut] & 0xc0) === 0x80) cut--; // not inside a character
  return b.subarray(0, cut).toString('utf8') + ellipsis;
}

// The outcomes, as sdk/transport's constructors of the same names.
// delivered: the receiver has the message.
const delivered = (statusCode = 0) => ({ kind: 'delivered', statusCode });
// retryable: a try that failed in a way another may fix; it spends one
// attempt of the delivery's allowance. retryAfterMs is the receiver's hint.
const retryable = (statusCode, reason, retryAfterMs = 0) => ({ kind: 'retryable', statusCode, error: reason, retryAfterMs });
// permanent: a try that failed in a way no retry will fix.
const permanent = (statusCode, reason) => ({ kind: 'permanent', statusCode, error: reason });
// refused: nothing went out, and no retry will help (the endpoint's config
// is unusable): the delivery fails with the reason and no attempt counts.
const refused = (reason) => ({ kind: 'permanent', error: reason, noRequest: true });
// deferred: nothing went out, for a passing reason of the plugin's own (it
// is stopping): tried again shortly, and no attempt counts.
const deferred = (reason) => ({ kind: 'retryable', error: reason, noRequest: true });

const KINDS = {
  delivered: 'OUTCOME_KIND_DELIVERED',
  retryable: 'OUTCOME_KIND_RETRYABLE',
  permanent: 'OUTCOME_KIND_PERMANENT',
};

function outcomeToProto(o) {
  // A kind the host does not know reads as retryable there; say it here.
  const kind = KINDS[o && o.kind] || 'OUTCOME_KIND_UNSPECIFIED';
  const status = Number.isInteger(o.statusCode) && o.statusCode > 0 ? o.statusCode : 0;
  const out = {
    kind,
    status_code: status,
    error: boundError(o.error),
    // Meaningless on a delivered message: it went out.
    no_request: Boolean(o.noRequest) && kind !== 'OUTCOME_KIND_DELIVERED',
    retry_after: null,
  };
  if (o.retryAfterMs > 0) {
    out.retry_after = { seconds: String(Math.floor(o.retryAfterMs / 1000)), nanos: Math.floor(o.retryAfterMs % 1000) * 1e6 };
  }
  return out;
}

function endpointFromProto(e) {
  return { url: (e && e.url) || '', config: { ...((e && e.config) || {}) } };
}

function messageFromProto(req, trace) {
  let deadline = null;
  if (req.deadline) {
    deadline = new Date(Number(req.deadline.seconds) * 1000 + Math.floor(req.deadline.nanos / 1e6));
  }
  return {
    deliveryId: req.delivery_id,
    attempt: req.attempt,
    endpoint: endpointFromProto(req.endpoint),
    // Carried exactly, in order. They hold the signature: never log them.
    headers: (req.headers || []).map((h) => ({ name: h.name, value: h.value })),
    body: req.body || Buffer.alloc(0), // the exact signed bytes
    deadline,
    // W3C trace context: the plugin's work is a child of traceparent.
    traceparent: trace.traceparent || '',
    tracestate: trace.tracestate || '',
  };
}

// runSend performs one attempt with the implementation; ac is aborted by
// whoever cancels it, and here at the attempt's deadline.
async function runSend(impl, req, trace, ac, log) {
  const msg = messageFromProto(req, trace);
  let timer;
  if (msg.deadline) {
    const left = msg.deadline.getTime() - Date.now();
    const passed = () => ac.abort(new Error('the attempt\'s deadline passed'));
    // Already over: aborted before the send starts, not a tick later.
    if (left <= 0) passed();
    else timer = setTimeout(passed, left);
  }
  // The answer goes when the signal aborts, whether or not the send
  // function heeds it: the host counts a plugin that has not answered
  // within its grace past the deadline as hung, and kills it with every
  // send in flight. What the send does afterwards is not reported; it is
  // an attempt either way, so a message that still goes out is a
  // duplicate, which at-least-once delivery allows.
  const stopped = new Promise((resolve) => {
    const answer = () => resolve(retryable(0, `the send had not ended when ${ac.signal.reason && ac.signal.reason.message}`));
    if (ac.signal.aborted) answer();
    else ac.signal.addEventListener('abort', answer, { once: true });
  });
  try {
    const sent = Promise.resolve().then(() => impl.send(msg, { signal: ac.signal, log }));
    return outcomeToProto(await Promise.race([sent, stopped]));
  } catch (err) {
    // A bug in the plugin: a request may have gone out, so it counts.
    log.error('send failed', { delivery_id: msg.deliveryId, attempt: msg.attempt, error: String(err && err.message) });
    return outcomeToProto(retryable(0, `the plugin failed: ${err && err.message}`));
  } finally {
    clearTimeout(timer);
  }
}

// refusal is an error's text, never empty: an empty error means accepted.
function refusal(err) {
  return boundError(err && err.message) || 'refused without a reason';
}

function metadataValue(md, key) {
  const v = md.get(key);
  return v.length > 0 ? String(v[0]) : '';
}

// register adds the Transport service for impl to server.
function register(server, impl, log) {
  // A plugin without settings refuses any it is given, naming them, rather
  // than let an operator believe a mistyped one took effect.
  const configure = impl.configure || ((settings) => {
    const keys = Object.keys(settings);
    if (keys.length > 0) throw new Error(`unknown settings ${keys.join(', ')}: this plugin takes none`);
  });
  const { Transport } = loadProto('transport.proto').hymical.transport.v1;
  server.addService(Transport.service, {
    Configure: async (call, cb) => {
      try {
        await configure({ ...call.request.settings }, { log });
        cb(null, { error: '' });
      } catch (err) {
        cb(null, { error: refusal(err) });
      }
    },

    Validate: async (call, cb) => {
      try {
        if (impl.validate) await impl.validate(endpointFromProto(call.request.endpoint), { log });
        cb(null, { error: '' });
      } catch (err) {
        cb(null, { error: refusal(err) });
      }
    },

    // Protocol 1. The call's own deadline is later than the attempt's (the
    // host adds a grace, so a timeout can still be reported as an
    // outcome); the attempt's is the one worked to. Trace context comes in
    // the call's metadata.
    Send: async (call, cb) => {
      const ac = new AbortController();
      call.on('cancelled', () => ac.abort(new Error('the host canceled the call')));
      const trace = { traceparent: metadataValue(call.metadata, 'traceparent'), tracestate: metadataValue(call.metadata, 'tracestate') };
      cb(null, await runSend(impl, call.request, trace, ac, log));
    },

    // Protocol 2: requests { id, send } or { id, cancel } in, replies
    // { id, outcome } out in whatever order the sends finish. A canceled
    // send is still answered (the host ignores it). When the stream ends,
    // every send still running on it is aborted.
    SendStream: (call) => {
      const running = new Map(); // id (a decimal string) -> AbortController
      let ended = false;
      call.on('data', (req) => {
        const id = req.id;
        if (req.cancel) {
          const ac = running.get(id);
          if (ac) ac.abort(new Error('the host canceled the attempt'));
          return;
        }
        const ac = new AbortController();
        running.set(id, ac);
        if (running.size >= MAX_CONCURRENT_SENDS) call.pause();
        // A request without a send is malformed; it is answered all the
        // same (the implementation refuses an endpoint with no config).
        const send = req.send || {};
        const trace = { traceparent: send.traceparent, tracestate: send.tracestate };
        runSend(impl, send, trace, ac, log).then((outcome) => {
          running.delete(id);
          if (call.isPaused() && running.size < MAX_CONCURRENT_SENDS) call.resume();
          if (!ended) call.write({ id, outcome });
        });
      });
      const end = () => {
        if (ended) return;
        ended = true;
        for (const ac of running.values()) ac.abort(new Error('the stream ended'));
      };
      // The host closed its side: the stream is over, as it is for a Go
      // plugin, whose handler returns at the end of the requests.
      call.on('end', () => {
        end();
        call.end();
      });
      call.on('cancelled', end);
      call.on('error', end);
    },
  });
}

module.exports = {
  PROTOCOL_VERSIONS, MAGIC_COOKIE, MAX_ERROR_BYTES, register, boundError,
  delivered, retryable, permanent, refused, deferred,
};
