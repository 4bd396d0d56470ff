// DemandWindow (rstreams/web/demand.js): the automatic top-up rule on its own.
// How the session applies it is in protocol.test.mjs ("automatic demand").
import { test } from "node:test";
import assert from "node:assert/strict";

import { AdaptiveDemand, DemandWindow } from "../../rstreams/web/demand.js";

test("DemandWindow: request what was consumed once half the window is", () => {
  const window = new DemandWindow(4);
  assert.equal(window.initial, 4);
  assert.deepStrictEqual([1, 1, 1, 1, 1].map((n) => window.consumed(n)), [0, 2, 0, 2, 0]);
  const one = new DemandWindow(1);
  assert.deepStrictEqual([1, 1].map((n) => one.consumed(n)), [1, 1]);
  assert.throws(() => new DemandWindow(0), RangeError);
});

test("DemandWindow: requested never exceeds consumed + size, outstanding never drops below size / 2", () => {
  for (const size of [1, 2, 3, 7, 64]) {
    const window = new DemandWindow(size);
    let requested = window.initial;
    let consumed = 0;
    for (let step = 0; step < 500; step++) {
      const n = 1 + (step % 3);
      consumed += n;
      requested += window.consumed(n);
      assert.ok(requested <= consumed + size, `size ${size}: requested ${requested} > consumed ${consumed} + size`);
      // And never starved: the outstanding demand stays at least half the window.
      assert.ok(requested - consumed >= size / 2, `size ${size}: outstanding ${requested - consumed} < half the window`);
    }
  }
});

test("AdaptiveDemand: doubles when starved, shrinks when everything requested waits, capped by bytes", () => {
  let outstanding = 3;
  let bytes = 8;
  const window = new AdaptiveDemand(() => [outstanding, bytes], { initial: 16, maximum: 128 });
  assert.equal(window.initial, 16);
  const sizes = [];
  for (let round = 0; round < 5; round++) {
    window.starved();
    while (!window.consumed(1));
    sizes.push(window.size);
  }
  assert.deepStrictEqual(sizes, [32, 64, 128, 128, 128]);
  outstanding = 0;
  for (let i = 0; i < 2000; i++) window.consumed(1);
  assert.equal(window.size, 4);
  bytes = 1024 * 1024;
  const big = new AdaptiveDemand(() => [1, bytes], { initial: 16, minimum: 2 });
  for (let i = 0; i < 64; i++) {
    big.starved();
    big.consumed(1);
  }
  assert.equal(big.size, 8);
  assert.throws(() => new AdaptiveDemand(() => [0, 0], { initial: 2, minimum: 4 }), RangeError);
});

test("AdaptiveDemand: what was requested and not consumed never exceeds the largest window", () => {
  let seed = 7;
  const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  let outstanding = 0;
  const window = new AdaptiveDemand(() => [outstanding, 100], { initial: 16, maximum: 4096 });
  let requested = window.initial;
  let consumed = 0;
  let largest = window.size;
  for (let step = 0; step < 5000; step++) {
    const inFlight = requested - consumed;
    const n = Math.min(inFlight, 1 + Math.floor(random() * 40));
    if (n === 0) continue;
    outstanding = Math.floor(random() * (inFlight - n + 1));
    if (random() < 0.5) window.starved();
    consumed += n;
    requested += window.consumed(n);
    largest = Math.max(largest, window.size);
    assert.ok(window.size >= 4 && window.size <= 4096);
    assert.ok(requested - consumed >= 0 && requested - consumed <= largest);
  }
});
