'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');

const { createDedupe, memoryStore } = require('..');

const id = 'sub_48984534f33749c49a88de2d59400dce';

test('a submission is processed once, and recorded only when it succeeds', async () => {
  const dedupe = createDedupe();
  let runs = 0;
  await assert.rejects(dedupe.process(id, () => { runs++; throw new Error('database down'); }), /database down/);
  assert.deepEqual(await dedupe.process(id, () => { runs++; return 'stored'; }), { duplicate: false, result: 'stored' });
  assert.deepEqual(await dedupe.process(id, () => { runs++; }), { duplicate: true });
  assert.equal(runs, 2);
});

test('a second delivery arriving while the first is in progress waits for it', async () => {
  const dedupe = createDedupe();
  let running = 0;
  let runs = 0;
  let release;
  const gate = new Promise((r) => { release = r; });
  const work = async () => {
    running++;
    runs++;
    assert.equal(running, 1, 'two runs for one id at once');
    await gate;
    running--;
  };
  const first = dedupe.process(id, work);
  const second = dedupe.process(id, work);
  await new Promise((r) => setImmediate(r));
  release();
  assert.deepEqual(await first, { duplicate: false, result: undefined });
  assert.deepEqual(await second, { duplicate: true });
  assert.equal(runs, 1);
});

test('when the one in progress fails, the waiting delivery runs it', async () => {
  const dedupe = createDedupe();
  let fail;
  const failing = dedupe.process(id, () => new Promise((_, reject) => { fail = reject; }));
  const waiting = dedupe.process(id, () => 'second');
  await new Promise((r) => setImmediate(r));
  fail(new Error('first failed'));
  await assert.rejects(failing, /first failed/);
  assert.deepEqual(await waiting, { duplicate: false, result: 'second' });
});

test('a store of your own, async', async () => {
  const rows = new Set();
  const store = {
    seen: async (key) => rows.has(key),
    remember: async (key) => { rows.add(key); },
  };
  const dedupe = createDedupe(store);
  await dedupe.process(id, () => {});
  assert.ok(rows.has(id));
  assert.deepEqual(await dedupe.process(id, () => {}), { duplicate: true });
  assert.throws(() => createDedupe({ seen() {} }), /seen\(id\) and remember\(id\)/);
});

test('ids no store can key on are refused', async () => {
  const dedupe = createDedupe();
  await assert.rejects(dedupe.process('', () => {}), /invalid dedupe id: it is empty/);
  await assert.rejects(dedupe.process(undefined, () => {}), /invalid dedupe id/);
  await assert.rejects(dedupe.process('x'.repeat(256), () => {}), /256 bytes, more than the 255 allowed/);
});

test('the memory store forgets the oldest beyond maxIds, and after ttlMs', () => {
  let now = 0;
  const s = memoryStore({ maxIds: 2, ttlMs: 1000, now: () => now });
  s.remember('a');
  now = 500;
  s.remember('b');
  now = 900;
  s.remember('c'); // a third: a, the oldest, makes room
  assert.equal(s.seen('a'), false);
  assert.equal(s.seen('b') && s.seen('c'), true);
  now = 1500; // b was recorded 1000 ms ago, c 600
  assert.equal(s.seen('b'), false);
  assert.equal(s.seen('c'), true);
  assert.equal(s.size(), 1);
  assert.throws(() => memoryStore({ maxIds: 0 }), RangeError);
  assert.throws(() => memoryStore({ ttlMs: -1 }), RangeError);
});
