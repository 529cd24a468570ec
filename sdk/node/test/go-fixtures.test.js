'use strict';

// Messages signed by the Go SDK (sdk/webhook), written by its test
// TestNodeReceiver, which runs this file with HYMICAL_WEBHOOK_FIXTURES set:
//
//   cd sdk/webhook && go test -run TestNodeReceiver .

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');

const { Verifier, WebhookError, createDedupe, receive } = require('..');

const path = process.env.HYMICAL_WEBHOOK_FIXTURES;

if (!path) {
  test('messages signed by the Go SDK', () => {
    assert.fail('HYMICAL_WEBHOOK_FIXTURES is not set: these tests run on fixtures the Go SDK signs; run them with: cd sdk/webhook && go test -run TestNodeReceiver .');
  });
} else {
  const fixtures = JSON.parse(fs.readFileSync(path, 'utf8'));

  test('messages signed by the Go SDK', async (t) => {
    assert.ok(fixtures.cases.length > 0, 'no fixtures');
    for (const c of fixtures.cases) {
      await t.test(c.name, () => {
        const options = {};
        if (c.tolerance) options.tolerance = c.tolerance;
        if (c.now_ms) options.now = () => c.now_ms;
        const body = Buffer.from(c.body, 'base64');

        if (c.want_key_error) {
          assert.throws(() => new Verifier(c.keys, options), (err) => {
            assert.ok(err instanceof WebhookError);
            assert.equal(err.code, 'INVALID_KEY');
            assertNoKeyIn(err, c.keys);
            return true;
          });
          return;
        }
        const verifier = new Verifier(c.keys, options);
        if (c.want_ok) {
          const m = verifier.verify(c.headers, body);
          assert.equal(m.messageId, c.want_ok.message_id);
          if (c.want_ok.timestamp) assert.equal(m.timestamp.getTime(), c.want_ok.timestamp * 1000);
          assert.equal(m.type, c.want_ok.type);
          assert.equal(m.submissionId, c.want_ok.submission_id);
          assert.ok(m.body.equals(body), 'the body comes back as the bytes that were verified');
          assert.deepEqual(m.event, JSON.parse(body.toString('utf8')));
          // The same message as a fetch Headers and as a Uint8Array body.
          const fetchHeaders = new Headers();
          for (const [k, v] of Object.entries(c.headers)) {
            for (const one of [].concat(v)) fetchHeaders.append(k, one);
          }
          assert.equal(verifier.verify(fetchHeaders, new Uint8Array(body)).messageId, c.want_ok.message_id);
          return;
        }
        assert.throws(() => verifier.verify(c.headers, body), (err) => {
          assert.ok(err instanceof WebhookError, `want a WebhookError, got ${err}`);
          assert.equal(err.code, c.want_error, err.message);
          assert.equal(err.status, c.want_error === 'INVALID_EVENT' ? 400 : 401);
          if (c.want_error_header) assert.equal(err.header, c.want_error_header);
          assertNoKeyIn(err, c.keys);
          return true;
        });
      });
    }
  });

  test('one submission delivered three times is handled once', async () => {
    const d = fixtures.dedupe;
    const verifier = new Verifier(d.keys, { now: () => d.now_ms });
    const dedupe = createDedupe();
    const handled = [];
    const statuses = [];
    for (const delivery of d.deliveries) {
      const r = await receive({
        verifier, dedupe, headers: delivery.headers, body: Buffer.from(delivery.body, 'base64'),
        onSubmission: (m) => { handled.push(m.submissionId); },
      });
      statuses.push(r.status);
    }
    assert.deepEqual(statuses, d.statuses);
    assert.deepEqual(handled, d.handled);
  });
}

// assertNoKeyIn checks that an error names no secret or key, whole or
// after its prefix.
function assertNoKeyIn(err, keys) {
  for (const k of keys) {
    const bare = k.replace(/^wh(sec|sk|pk)_/, '');
    assert.ok(!err.message.includes(bare), `the error leaks a key: ${err.message}`);
  }
}
