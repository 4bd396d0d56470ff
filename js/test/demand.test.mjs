// DemandWindow (rstreams/web/demand.js): the automatic top-up rule on its own.
// How the session applies it is in protocol.test.mjs ("automatic demand").
import { test } from "node:test";
import assert from "node:assert/strict";

import { DemandWindow } from "../../rstreams/web/demand.js";

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
