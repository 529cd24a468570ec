'use strict';

// The jsonl transport, as examples/custom-transport (Go) does it: append
// each signed message, headers and exact body, as one JSON line to the
// file the endpoint names, and sync it before reporting it delivered. The
// lines have the same fields, so one reader serves both plugins.

const fs = require('node:fs');
const path = require('node:path');
const { delivered, retryable, refused } = require('./transport');

// The plugin-wide setting: when set, an absolute directory every
// endpoint's file must lie in. Endpoints are created by API users, settings
// by the operator: this keeps users from appending to any file the
// server's user can write.
const SETTING_ROOT = 'root';
// The endpoint's config key: the absolute, clean path of its file.
const CONFIG_PATH = 'path';

const strictUTF8 = new TextDecoder('utf-8', { fatal: true });

function isClean(p) {
  return path.isAbsolute(p) && path.normalize(p) === p && (p === '/' || !p.endsWith('/'));
}

class JSONL {
  constructor(log) {
    this.log = log;
    this.root = '';
    // Appends run one at a time, in arrival order.
    this.queue = Promise.resolve();
  }

  // Settings not given take their defaults, so each configure replaces
  // the last.
  async configure(settings) {
    let root = '';
    for (const [key, value] of Object.entries(settings)) {
      if (key !== SETTING_ROOT) {
        throw new Error(`unknown setting "${key}": the jsonl-node plugin takes only "${SETTING_ROOT}"`);
      }
      if (!isClean(value)) {
        throw new Error(`setting ${SETTING_ROOT}: "${value}" must be an absolute, clean directory path such as /var/lib/hymical/outbox`);
      }
      let st;
      try {
        st = fs.statSync(value);
      } catch (err) {
        throw new Error(`setting ${SETTING_ROOT}: ${err.message}; create the directory first`);
      }
      if (!st.isDirectory()) throw new Error(`setting ${SETTING_ROOT}: ${value} is not a directory`);
      root = value;
    }
    this.root = root;
  }

  async validate(endpoint) {
    this.target(endpoint);
  }

  // target is the endpoint's file, or throws saying what is wrong with its
  // config and what to write instead.
  target(endpoint) {
    for (const key of Object.keys(endpoint.config).sort()) {
      if (key !== CONFIG_PATH) {
        throw new Error(`unknown endpoint config "${key}": the jsonl-node plugin takes only "${CONFIG_PATH}"`);
      }
    }
    const p = endpoint.config[CONFIG_PATH] || '';
    if (p === '') {
      throw new Error(`endpoint config "${CONFIG_PATH}" is missing: set it to the absolute path of the file to append to`);
    }
    if (!path.isAbsolute(p)) {
      throw new Error(`endpoint config "${CONFIG_PATH}" is "${p}", a relative path: give an absolute one, since the plugin's working directory is not yours to rely on`);
    }
    if (!isClean(p)) {
      throw new Error(`endpoint config "${CONFIG_PATH}" is "${p}": write it clean, as "${path.normalize(p).replace(/(.)\/$/, '$1')}"`);
    }
    if (this.root !== '') {
      const rel = path.relative(this.root, p);
      if (rel === '' || rel === '..' || rel.startsWith('../') || path.isAbsolute(rel)) {
        throw new Error(`endpoint config "${CONFIG_PATH}" is "${p}", outside the directory ${this.root} the operator allows`);
      }
    }
    let st = null;
    try {
      st = fs.statSync(p);
    } catch {
      // Missing is fine: the first append creates it.
    }
    if (st && st.isDirectory()) {
      throw new Error(`endpoint config "${CONFIG_PATH}" is "${p}", a directory: name a file in it`);
    }
    return p;
  }

  async send(msg, signal) {
    let file;
    try {
      file = this.target(msg.endpoint);
    } catch (err) {
      // The endpoint cannot work as configured, and nothing was written:
      // the delivery fails with this reason, and no attempt counts.
      return refused(err.message);
    }
    const line = { delivery_id: msg.deliveryId, attempt: msg.attempt, headers: msg.headers };
    try {
      line.body = strictUTF8.decode(msg.body);
    } catch {
      line.body_base64 = msg.body.toString('base64');
    }
    const data = JSON.stringify(line) + '\n';

    // One append at a time; the next waits for this one whatever it gives.
    const result = this.queue.then(() => this.append(file, data, msg, signal));
    this.queue = result.catch(() => {});
    return result;
  }

  async append(file, data, msg, signal) {
    // Waiting for the file may have used up the deadline; a late append
    // would be a delivery the host has already given up on.
    if (signal.aborted) {
      return retryable(0, `the file was not free before the attempt ended: ${signal.reason && signal.reason.message}`);
    }
    let fh;
    try {
      fh = await fs.promises.open(file, 'a', 0o600);
      await fh.writeFile(data);
      await fh.sync(); // delivered must mean on disk
    } catch (err) {
      // A missing directory, a full disk: another try may work. The text
      // names the file, never a header or the body.
      return retryable(0, `appending to ${file}: ${err.message}`);
    } finally {
      if (fh) await fh.close().catch(() => {});
    }
    // Ids, the path and the trace only: the headers carry the signature.
    const fields = { delivery_id: msg.deliveryId, attempt: msg.attempt, path: file };
    // The trace id lets an operator find the attempt's trace; a plugin
    // with OpenTelemetry would start its span as a child of traceparent.
    const traceID = msg.traceparent.split('-')[1];
    if (traceID) fields.trace_id = traceID;
    this.log.info('appended message', fields);
    return delivered(0);
  }
}

module.exports = { JSONL, SETTING_ROOT, CONFIG_PATH };
