'use strict';

// Verifies Hymical's webhooks in Node: the Standard Webhooks scheme, v1
// (HMAC-SHA256 with a whsec_ secret) and v1a (Ed25519, verified with a whpk_
// public key), as sdk/webhook in Go signs them, and deduplicates on the
// submission id. Node's own crypto only: no dependencies.
//
// The rules are the Go SDK's (sdk/webhook/verify.go), and a Go test
// (sdk/webhook/node_receiver_test.go) runs this package's tests against
// messages the Go SDK signed, so the two cannot drift apart.

const crypto = require('node:crypto');
const util = require('node:util');

const HEADER_ID = 'webhook-id';
const HEADER_TIMESTAMP = 'webhook-timestamp';
const HEADER_SIGNATURE = 'webhook-signature';

const SECRET_PREFIX = 'whsec_';
const SIGNING_KEY_PREFIX = 'whsk_';
const PUBLIC_KEY_PREFIX = 'whpk_';

/** Seconds a timestamp may lie in the past or the future: Standard Webhooks' five minutes. */
const DEFAULT_TOLERANCE_SECONDS = 300;

/** The type of the event every form submission produces. */
const EVENT_SUBMISSION_RECEIVED = 'submission.received';

/** Longest dedupe id accepted; Hymical's submission ids are 36 bytes. */
const MAX_ID_BYTES = 255;

// An Ed25519 check costs far more than an HMAC comparison: a header packed
// with bogus v1a entries must not buy unbounded CPU. A sender emits one per
// active key. The Go SDK has the same bound.
const MAX_V1A_CHECKS = 16;

const HMAC_SIZE = 32;
const ED25519_SIGNATURE_SIZE = 64;
const ED25519_PUBLIC_KEY_SIZE = 32;
// DER of an Ed25519 SubjectPublicKeyInfo up to the key's 32 bytes.
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/**
 * The one error class of this package. `code` says what went wrong;
 * `status` is the HTTP status a receiver answers with (401 for a request
 * that failed verification, 400 for a verified body that is not a Hymical
 * event); `header` names the missing header for MISSING_HEADER. Messages
 * never contain a secret, a key or an expected signature, so they are safe
 * to log.
 */
class WebhookError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{status?: number, header?: string}} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message);
    this.name = 'WebhookError';
    this.code = code;
    if (extra.status !== undefined) this.status = extra.status;
    if (extra.header !== undefined) this.header = extra.header;
  }
}

// clip bounds attacker-supplied text before it goes into an error.
function clip(s) {
  return s.length <= 32 ? s : s.slice(0, 32) + '...';
}

function invalidKey(index, count, message) {
  const where = count > 1 ? `key ${index + 1} of ${count}: ` : '';
  return new WebhookError('INVALID_KEY', `hymical webhook: invalid key: ${where}${message}`);
}

// Standard base64 with its padding. Buffer.from(s, 'base64') skips
// characters it does not know, so the shape is checked first.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function decodeBase64(s) {
  return BASE64.test(s) ? Buffer.from(s, 'base64') : null;
}

// decodeStrict also refuses non-zero padding bits, as Go's
// base64.StdEncoding.Strict() does for signatures and public keys: one
// value has one spelling.
function decodeStrict(s) {
  const b = decodeBase64(s);
  return b !== null && b.toString('base64') === s ? b : null;
}

/**
 * Parses the keys a receiver verifies with, each by its prefix.
 * @param {string[]} keys
 */
function parseKeys(keys) {
  const hmac = [];
  const ed25519 = [];
  keys.forEach((raw, i) => {
    if (typeof raw !== 'string') {
      throw invalidKey(i, keys.length, `it is a ${raw === null ? 'null' : typeof raw}, not a string`);
    }
    const key = raw.trim();
    if (key.startsWith(PUBLIC_KEY_PREFIX)) {
      const b = decodeStrict(key.slice(PUBLIC_KEY_PREFIX.length));
      if (b === null) {
        throw invalidKey(i, keys.length, `the public key is not standard base64 after "${PUBLIC_KEY_PREFIX}"; copy it again exactly as issued`);
      }
      if (b.length !== ED25519_PUBLIC_KEY_SIZE) {
        throw invalidKey(i, keys.length, `the public key decodes to ${b.length} bytes, want ${ED25519_PUBLIC_KEY_SIZE}: an Ed25519 public key`);
      }
      ed25519.push(crypto.createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, b]), format: 'der', type: 'spki' }));
      return;
    }
    if (key.startsWith(SIGNING_KEY_PREFIX)) {
      // Accepting it would work, but would teach receivers to hold the
      // sender's private key, which v1a exists to avoid.
      throw invalidKey(i, keys.length, `a ${SIGNING_KEY_PREFIX} signing key is the sender's private key; verify with its ${PUBLIC_KEY_PREFIX} public key and keep the signing key off the receiver`);
    }
    // A v1 secret, with or without its prefix, as other Standard Webhooks
    // libraries accept it.
    const enc = key.startsWith(SECRET_PREFIX) ? key.slice(SECRET_PREFIX.length) : key;
    if (enc === '') {
      throw invalidKey(i, keys.length, `the secret is empty; want "${SECRET_PREFIX}" followed by standard base64`);
    }
    const b = decodeBase64(enc);
    if (b === null) {
      throw invalidKey(i, keys.length, `the secret is not standard base64 after any "${SECRET_PREFIX}" prefix; copy it again exactly as issued`);
    }
    hmac.push(b);
  });
  return { hmac, ed25519 };
}

/**
 * Reads a header from Node's IncomingMessage.headers (or headersDistinct),
 * a fetch Headers, a Map, or any plain object, whatever the key's case.
 * @returns {string[]} its values, none when it is absent
 */
function headerValues(headers, name) {
  if (headers == null || typeof headers !== 'object') {
    throw new TypeError('hymical webhook: headers must be an object: req.headers, a fetch Headers or a Map');
  }
  let v;
  if (headers instanceof Map) {
    for (const [k, val] of headers) if (String(k).toLowerCase() === name) { v = val; break; }
  } else if (typeof headers.get === 'function') {
    v = headers.get(name); // a fetch Headers, which ignores case itself
  } else {
    v = headers[name];
    if (v === undefined) {
      for (const k of Object.keys(headers)) if (k.toLowerCase() === name) { v = headers[k]; break; }
    }
  }
  if (v == null) return [];
  return (Array.isArray(v) ? v : [v]).map(String);
}

function firstHeader(headers, name) {
  const vs = headerValues(headers, name);
  return vs.length > 0 ? vs[0].trim() : '';
}

function toBuffer(body) {
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return Buffer.from(body, 'utf8');
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  throw new TypeError('hymical webhook: body must be the raw request body (a Buffer, Uint8Array or string), ' +
    `not ${body === null ? 'null' : typeof body}: a parsed JSON object cannot be verified, ` +
    "since re-encoding changes its bytes; read it raw (e.g. express.raw({ type: 'application/json' }))");
}

// The int64 range the Go SDK parses a timestamp in.
const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * One verified message.
 * @typedef {object} VerifiedMessage
 * @property {string} messageId the webhook-id header: the delivery's id, the same on every attempt of one delivery but different for each endpoint
 * @property {Date} timestamp the webhook-timestamp header: when this attempt was signed
 * @property {Buffer} body the raw body, exactly as it was verified
 * @property {any} event the body parsed as JSON
 * @property {string} type event.type, e.g. "submission.received"
 * @property {string | undefined} submissionId event.submission.id for a submission event: the dedupe key, stable across every attempt and replay; undefined for other event types
 */

/**
 * Checks signed messages against one or more v1 secrets (whsec_) and v1a
 * public keys (whpk_). Give it the new and the old key during a rotation.
 * Printed or logged, it shows how many keys it holds, never the keys.
 */
class Verifier {
  #hmac;
  #ed25519;
  #toleranceMs;
  #now;

  /**
   * @param {string | string[]} keys whsec_ secrets (or bare base64) and whpk_ public keys, in any mix
   * @param {{tolerance?: number, now?: () => number}} [options] tolerance in seconds (default 300), either way; now returns the clock in milliseconds (default Date.now)
   */
  constructor(keys, options = {}) {
    const list = typeof keys === 'string' ? [keys] : keys;
    if (!Array.isArray(list) || list.length === 0) {
      throw new WebhookError('INVALID_KEY', 'hymical webhook: invalid key: no key given; pass a whsec_ secret or a whpk_ public key, or several during a rotation');
    }
    const { hmac, ed25519 } = parseKeys(list);
    const tolerance = options.tolerance ?? DEFAULT_TOLERANCE_SECONDS;
    if (typeof tolerance !== 'number' || !(tolerance > 0) || !Number.isFinite(tolerance)) {
      throw new RangeError(`hymical webhook: tolerance must be a positive number of seconds, got ${String(tolerance)}`);
    }
    const now = options.now ?? Date.now;
    if (typeof now !== 'function') {
      throw new TypeError('hymical webhook: now must be a function returning milliseconds, like Date.now');
    }
    this.#hmac = hmac;
    this.#ed25519 = ed25519;
    this.#toleranceMs = BigInt(Math.round(tolerance * 1000));
    this.#now = now;
  }

  toString() {
    return `Verifier{${this.#hmac.length} v1 secret(s), ${this.#ed25519.length} v1a public key(s), tolerance ${Number(this.#toleranceMs) / 1000}s}`;
  }

  [util.inspect.custom]() {
    return this.toString();
  }

  toJSON() {
    return this.toString();
  }

  /**
   * Verifies one message and returns it parsed: verifySignature, then the
   * body read as a Hymical event. body must be the raw
   * request body, before any JSON parsing. Throws a WebhookError whose
   * code is MISSING_HEADER, MALFORMED_TIMESTAMP, TIMESTAMP_TOO_OLD,
   * TIMESTAMP_TOO_NEW or NO_MATCHING_SIGNATURE (status 401), or
   * INVALID_EVENT (status 400) for a verified body that is not a JSON
   * event, or a submission event without a usable submission.id.
   * @param {object} headers req.headers, a fetch Headers or a Map
   * @param {Buffer | Uint8Array | string} body
   * @returns {VerifiedMessage}
   */
  verify(headers, body) {
    const { messageId, timestamp, body: raw } = this.verifySignature(headers, body);
    return decodeEvent(messageId, timestamp, raw);
  }

  /**
   * Checks the signature and the timestamp only, as any Standard Webhooks
   * receiver does, and leaves the body unparsed. Throws as verify does,
   * except for INVALID_EVENT.
   * @param {object} headers req.headers, a fetch Headers or a Map
   * @param {Buffer | Uint8Array | string} body
   * @returns {{messageId: string, timestamp: Date, body: Buffer}}
   */
  verifySignature(headers, body) {
    const raw = toBuffer(body);
    const id = firstHeader(headers, HEADER_ID);
    if (id === '') throw missingHeader(HEADER_ID);
    const unix = firstHeader(headers, HEADER_TIMESTAMP);
    if (unix === '') throw missingHeader(HEADER_TIMESTAMP);
    // Node joins repeated headers with ", " (fetch's Headers too), so a
    // separating comma may trail a signature; base64 has no commas.
    const fields = headerValues(headers, HEADER_SIGNATURE)
      .flatMap((v) => v.split(/\s+/))
      .filter((f) => f !== '')
      .map((f) => f.replace(/,$/, ''));
    if (fields.length === 0) throw missingHeader(HEADER_SIGNATURE);

    // Only canonical decimal: a "+" or leading zeros would mean the same
    // time but hash differently from what the sender signed.
    if (!/^(?:0|-?[1-9][0-9]*)$/.test(unix) || BigInt(unix) < INT64_MIN || BigInt(unix) > INT64_MAX) {
      throw new WebhookError('MALFORMED_TIMESTAMP',
        `hymical webhook: malformed timestamp: ${HEADER_TIMESTAMP} is ${JSON.stringify(clip(unix))}, want whole unix seconds in decimal`,
        { status: 401 });
    }
    const tsMs = BigInt(unix) * 1000n;
    const nowMs = BigInt(Math.floor(this.#now()));
    const tolerance = `tolerance is ${Number(this.#toleranceMs) / 1000}s`;
    if (nowMs - tsMs > this.#toleranceMs) {
      throw new WebhookError('TIMESTAMP_TOO_OLD',
        `hymical webhook: timestamp too old: ${seconds(nowMs - tsMs)} in the past, ${tolerance}; the request may be a replay, or the receiver's clock is wrong`,
        { status: 401 });
    }
    if (tsMs - nowMs > this.#toleranceMs) {
      throw new WebhookError('TIMESTAMP_TOO_NEW',
        `hymical webhook: timestamp too new: ${seconds(tsMs - nowMs)} in the future, ${tolerance}; the sender's or the receiver's clock is wrong`,
        { status: 401 });
    }

    // The header's own digits are signed, and only canonical ones passed.
    const content = Buffer.concat([Buffer.from(`${id}.${unix}.`, 'utf8'), raw]);
    const expected = this.#hmac.map((k) => crypto.createHmac('sha256', k).update(content).digest());
    let v1 = 0;
    let v1a = 0;
    let v1aChecked = 0;
    let matched = false;
    for (const field of fields) {
      const comma = field.indexOf(',');
      if (comma < 0) continue;
      const version = field.slice(0, comma);
      const enc = field.slice(comma + 1);
      if (version === 'v1') {
        v1++;
        const got = decodeStrict(enc);
        if (got === null || got.length !== HMAC_SIZE) continue;
        // Every secret is compared, in constant time, whether or not an
        // earlier one matched.
        for (const want of expected) {
          if (crypto.timingSafeEqual(got, want)) matched = true;
        }
      } else if (version === 'v1a') {
        v1a++;
        if (this.#ed25519.length === 0 || v1aChecked === MAX_V1A_CHECKS) continue;
        const got = decodeStrict(enc);
        if (got === null || got.length !== ED25519_SIGNATURE_SIZE) continue;
        v1aChecked++;
        for (const pub of this.#ed25519) {
          if (crypto.verify(null, content, pub, got)) matched = true;
        }
      }
      // Other versions are skipped, so a sender can add a new scheme
      // alongside.
      if (matched) break;
    }
    if (!matched) {
      throw new WebhookError('NO_MATCHING_SIGNATURE',
        `hymical webhook: no matching signature: none of the ${fields.length} signatures in ${HEADER_SIGNATURE} ` +
        `(${v1} of them v1, ${v1a} v1a) matches the ${this.#hmac.length} secret(s) and ${this.#ed25519.length} public key(s) tried; ` +
        'the body was altered (verify the raw bytes, before parsing) or the key is wrong',
        { status: 401 });
    }
    return { messageId: id, timestamp: new Date(Number(unix) * 1000), body: raw };
  }
}

function missingHeader(name) {
  return new WebhookError('MISSING_HEADER',
    `hymical webhook: missing header ${name}: the request is not a signed webhook, or something on the way dropped the header`,
    { status: 401, header: name });
}

function seconds(ms) {
  return `${Number(ms) / 1000}s`;
}

function invalidEvent(message) {
  return new WebhookError('INVALID_EVENT', `hymical webhook: invalid event: ${message}`, { status: 400 });
}

function decodeEvent(messageId, timestamp, raw) {
  let event;
  try {
    event = JSON.parse(raw.toString('utf8'));
  } catch {
    throw invalidEvent('the body is not JSON');
  }
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    throw invalidEvent('the body is not a JSON object');
  }
  if (event.type !== undefined && typeof event.type !== 'string') {
    throw invalidEvent('the event\'s type is not a string');
  }
  const type = event.type ?? '';
  let submissionId;
  if (type === EVENT_SUBMISSION_RECEIVED) {
    submissionId = event.submission && event.submission.id;
    if (checkId(submissionId) !== null) throw invalidEvent('submission.id is missing or too long');
  }
  return { messageId, timestamp, body: raw, event, type, submissionId };
}

// checkId returns why id cannot be a dedupe key, or null.
function checkId(id) {
  if (typeof id !== 'string' || id === '') return "it is empty; key on the event's submission.id";
  const n = Buffer.byteLength(id, 'utf8');
  if (n > MAX_ID_BYTES) return `it is ${n} bytes, more than the ${MAX_ID_BYTES} allowed`;
  return null;
}

/**
 * Where a Dedupe records processed ids. Both methods may be async. For a
 * receiver on several processes keep them in a shared database, and make
 * remember an insert into a table whose primary key is the id.
 * @typedef {object} DedupeStore
 * @property {(id: string) => boolean | Promise<boolean>} seen whether id was recorded
 * @property {(id: string) => void | Promise<void>} remember record id as processed
 */

/**
 * A DedupeStore in this process's memory: for tests and single-process
 * receivers that can afford to process a submission again after a restart
 * or once it has been forgotten (the oldest go first beyond maxIds, and
 * each after ttlMs when given).
 * @param {{maxIds?: number, ttlMs?: number, now?: () => number}} [options]
 * @returns {DedupeStore & {size: () => number}}
 */
function memoryStore(options = {}) {
  const maxIds = options.maxIds ?? 100000;
  const ttlMs = options.ttlMs ?? 0;
  const now = options.now ?? Date.now;
  if (!Number.isInteger(maxIds) || maxIds <= 0) {
    throw new RangeError(`hymical webhook: maxIds must be a positive integer, got ${String(maxIds)}`);
  }
  if (typeof ttlMs !== 'number' || !(ttlMs >= 0) || !Number.isFinite(ttlMs)) {
    throw new RangeError(`hymical webhook: ttlMs must be 0 (no expiry) or a positive number of milliseconds, got ${String(ttlMs)}`);
  }
  /** @type {Map<string, number>} id -> when recorded, oldest first */
  const ids = new Map();
  const expire = () => {
    if (ttlMs === 0) return;
    const cutoff = now() - ttlMs;
    for (const [id, at] of ids) {
      if (at > cutoff) break;
      ids.delete(id);
    }
  };
  return {
    seen(id) {
      expire();
      return ids.has(id);
    },
    remember(id) {
      ids.delete(id);
      ids.set(id, now());
      while (ids.size > maxIds) ids.delete(ids.keys().next().value);
    },
    size() {
      expire();
      return ids.size;
    },
  };
}

/**
 * Deduplicates on the submission id. Hymical delivers at least once: the
 * same submission comes again after a worker died between your answer and
 * its record, and after every replay.
 * @param {DedupeStore} [store] where processed ids are kept (default: memoryStore())
 */
function createDedupe(store = memoryStore()) {
  if (store == null || typeof store.seen !== 'function' || typeof store.remember !== 'function') {
    throw new TypeError('hymical webhook: a dedupe store needs seen(id) and remember(id) functions');
  }
  /** @type {Map<string, Promise<unknown>>} calls in progress in this process, by id */
  const running = new Map();
  return {
    /**
     * Runs fn for id unless id was recorded, and records id only when fn
     * succeeds. A call that finds another call for the same id in progress
     * in this process waits for it: if that one succeeds this one is a
     * duplicate, if it fails this one runs fn itself. When fn throws, the
     * error propagates and id stays unrecorded, so the redelivery your
     * error causes runs fn again.
     * @template T
     * @param {string} id
     * @param {() => T | Promise<T>} fn
     * @returns {Promise<{duplicate: true} | {duplicate: false, result: T}>}
     */
    async process(id, fn) {
      const bad = checkId(id);
      if (bad !== null) throw new TypeError(`hymical webhook: invalid dedupe id: ${bad}`);
      for (;;) {
        const other = running.get(id);
        if (other === undefined) break;
        await other; // then look again: it either recorded id or failed
      }
      // Always resolved, never rejected: a waiter looks at the store again,
      // and a rejection nobody waits for would crash the process.
      let release;
      running.set(id, new Promise((resolve) => { release = resolve; }));
      try {
        if (await store.seen(id)) return { duplicate: true };
        const result = await fn();
        await store.remember(id);
        return { duplicate: false, result };
      } finally {
        running.delete(id);
        release();
      }
    },
  };
}

/**
 * Verifies, deduplicates and runs onSubmission for one request, and says
 * what to answer, as the Go SDK's Handler does: 204 when onSubmission
 * succeeded; 200 for a submission already processed; 204 for a verified
 * event of another type, acknowledged without handling (so a receiver that
 * predates a new type does not make it retry forever); 500 when
 * onSubmission threw (the id is not recorded and Hymical retries); 401
 * when verification failed; 400 for a verified body that is not an event.
 * Hymical treats any 4xx other than 408 and 429 as permanent.
 * @param {{verifier: Verifier, dedupe: ReturnType<typeof createDedupe>, headers: object, body: Buffer | Uint8Array | string,
 *   onSubmission: (message: VerifiedMessage) => unknown}} args
 * @returns {Promise<{status: number, reason: string, message?: VerifiedMessage, duplicate?: boolean, error?: unknown}>}
 */
async function receive({ verifier, dedupe, headers, body, onSubmission }) {
  let message;
  try {
    message = verifier.verify(headers, body);
  } catch (err) {
    if (err instanceof WebhookError && err.status !== undefined) {
      return { status: err.status, reason: shortReason(err), error: err };
    }
    throw err;
  }
  if (message.submissionId === undefined) {
    return { status: 204, reason: `not a submission event (${clip(message.type)}): acknowledged without handling`, message };
  }
  try {
    const r = await dedupe.process(message.submissionId, () => onSubmission(message));
    if (r.duplicate) return { status: 200, reason: 'already processed', message, duplicate: true };
    return { status: 204, reason: 'processed', message, duplicate: false };
  } catch (err) {
    return { status: 500, reason: 'the submission could not be processed; it will be retried', message, error: err };
  }
}

// shortReason is what the sender is told: the class of problem, no detail.
function shortReason(err) {
  switch (err.code) {
    case 'MISSING_HEADER': return `missing ${err.header} header`;
    case 'MALFORMED_TIMESTAMP': return `malformed ${HEADER_TIMESTAMP} header`;
    case 'TIMESTAMP_TOO_OLD':
    case 'TIMESTAMP_TOO_NEW': return `${HEADER_TIMESTAMP} is outside the tolerance; check the clocks`;
    case 'INVALID_EVENT': return err.message.replace(/^hymical webhook: /, '');
    default: return 'no matching signature';
  }
}

module.exports = {
  Verifier,
  WebhookError,
  createDedupe,
  memoryStore,
  receive,
  HEADER_ID,
  HEADER_TIMESTAMP,
  HEADER_SIGNATURE,
  DEFAULT_TOLERANCE_SECONDS,
  EVENT_SUBMISSION_RECEIVED,
  MAX_ID_BYTES,
};
