'use strict';

// What needs no Go-signed fixture: the published Standard Webhooks test
// vector, the shapes of headers and bodies Node frameworks hand over, key
// and option errors, and that nothing prints a key.

const test = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const util = require('node:util');

const { Verifier, WebhookError } = require('..');

// https://github.com/standard-webhooks/standard-webhooks, the spec's vector.
const vector = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  unix: '1614265330',
  body: '{"test": 2432232314}',
  sig: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};
const vectorNow = () => Number(vector.unix) * 1000;
const vectorHeaders = (sig = vector.sig) => ({
  'webhook-id': vector.id, 'webhook-timestamp': vector.unix, 'webhook-signature': sig,
});

test('the Standard Webhooks test vector', () => {
  const v = new Verifier(vector.secret, { now: vectorNow });
  const m = v.verifySignature(vectorHeaders(), vector.body);
  assert.equal(m.messageId, vector.id);
  assert.equal(m.timestamp.toISOString(), '2021-02-25T15:02:10.000Z');
  assert.equal(m.body.toString(), vector.body);
  // verify parses too; the vector's event has no type.
  assert.deepEqual(v.verify(vectorHeaders(), vector.body).event, { test: 2432232314 });
});

test('a signature among others, joined the way Node joins repeated headers', () => {
  const v = new Verifier(vector.secret, { now: vectorNow });
  const other = 'v1,' + crypto.randomBytes(32).toString('base64');
  for (const sig of [
    `${other} ${vector.sig}`,
    `${other}, ${vector.sig}`, // req.headers and fetch Headers join with ", "
    `v2,abc ${vector.sig} v1a,${crypto.randomBytes(64).toString('base64')}`,
    [other, vector.sig], // req.headersDistinct
  ]) {
    assert.equal(v.verifySignature(vectorHeaders(sig), vector.body).messageId, vector.id, String(sig));
  }
  const map = new Map(Object.entries(vectorHeaders()).map(([k, val]) => [k.toUpperCase(), val]));
  assert.equal(v.verifySignature(map, Buffer.from(vector.body)).messageId, vector.id);
});

test('signatures that are not quite right do not match', () => {
  const v = new Verifier(vector.secret, { now: vectorNow });
  const good = vector.sig.slice(3);
  for (const sig of [
    'v1,' + good.slice(0, -2) + 'A=', // another value
    'v1,' + good.replace('=', ''), // unpadded
    'v1a,' + good, // right bytes, wrong scheme
    'v1' + good, // no comma
    'v1,,' + good,
  ]) {
    assert.throws(() => v.verifySignature(vectorHeaders(sig), vector.body), { code: 'NO_MATCHING_SIGNATURE', status: 401 }, sig);
  }
});

test('the body must be the raw bytes', () => {
  const v = new Verifier(vector.secret, { now: vectorNow });
  assert.throws(() => v.verify(vectorHeaders(), JSON.parse(vector.body)), (err) => {
    assert.ok(err instanceof TypeError);
    assert.match(err.message, /raw request body/);
    return true;
  });
  assert.throws(() => v.verify(undefined, vector.body), TypeError);
});

test('keys that cannot be used are refused, and named by position only', () => {
  const cases = [
    [[], /no key given/],
    [[''], /empty/],
    [['whsec_'], /empty/],
    [['whsec_not base64!'], /not standard base64/],
    [[vector.secret, 'whsec_abc'], /key 2 of 2: .*not standard base64/],
    [['whpk_' + Buffer.alloc(31).toString('base64')], /31 bytes, want 32/],
    [['whpk_abc'], /not standard base64/],
    [['whsk_' + crypto.randomBytes(64).toString('base64')], /sender's private key/],
    [[42], /not a string/],
  ];
  for (const [keys, want] of cases) {
    assert.throws(() => new Verifier(keys), (err) => {
      assert.ok(err instanceof WebhookError, String(err));
      assert.equal(err.code, 'INVALID_KEY');
      assert.match(err.message, want);
      for (const k of keys) {
        if (typeof k === 'string' && k.length > 8) assert.ok(!err.message.includes(k.slice(5)), err.message);
      }
      return true;
    }, JSON.stringify(keys));
  }
  assert.throws(() => new Verifier(vector.secret, { tolerance: 0 }), RangeError);
  assert.throws(() => new Verifier(vector.secret, { tolerance: -5 }), RangeError);
  assert.throws(() => new Verifier(vector.secret, { now: 5 }), TypeError);
});

test('printing or logging a Verifier shows no key', () => {
  const { publicKey } = crypto.generateKeyPairSync('ed25519');
  const pk = 'whpk_' + publicKey.export({ format: 'der', type: 'spki' }).subarray(12).toString('base64');
  const v = new Verifier([vector.secret, pk]);
  for (const s of [util.inspect(v, { showHidden: true, depth: 10 }), String(v), JSON.stringify({ v }), `${v}`]) {
    assert.ok(!s.includes(vector.secret.slice(6)) && !s.includes(pk.slice(5)), s);
    assert.match(s, /1 v1 secret\(s\), 1 v1a public key\(s\)/);
  }
});

test('errors name the problem, not the expected signature', () => {
  const v = new Verifier(vector.secret, { now: vectorNow });
  const body = vector.body + ' ';
  assert.throws(() => v.verify(vectorHeaders(), body), (err) => {
    const expected = crypto.createHmac('sha256', Buffer.from(vector.secret.slice(6), 'base64'))
      .update(`${vector.id}.${vector.unix}.${body}`).digest('base64');
    assert.equal(err.code, 'NO_MATCHING_SIGNATURE');
    assert.ok(!err.message.includes(expected));
    assert.match(err.message, /1 signatures .*1 of them v1, 0 v1a.*1 secret\(s\) and 0 public key\(s\)/);
    return true;
  });
});
