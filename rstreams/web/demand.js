// demand.js: the subscriber's automatic demand top-up rule.
//
// Flow-control arithmetic, kept in its own small class (as Python's
// rstreams.protocol.DemandWindow) so the rule can be read and tested apart
// from the session that applies it.

/**
 * The subscriber's automatic demand, as in rstreams.protocol.DemandWindow:
 * request `size` up front; once at least half the window has been consumed,
 * request exactly what was consumed. So the total requested never exceeds
 * consumed + size, and the outstanding demand never drops below half the
 * window while the consumer keeps up.
 */
export class DemandWindow {
  constructor(size) {
    if (!Number.isInteger(size) || size <= 0) throw new RangeError(`window size must be a positive integer, got ${size}`);
    this.size = size;
    this.threshold = Math.max(1, Math.floor(size / 2));
    this.pending = 0;
  }
  get initial() {
    return this.size;
  }
  /** Record `n` consumed elements; returns how many to request now (often 0). */
  consumed(n) {
    this.pending += n;
    if (this.pending < this.threshold) return 0;
    const more = this.pending;
    this.pending = 0;
    return more;
  }
}

/**
 * The adaptive window, as in rstreams.protocol.AdaptiveDemand: what a
 * subscription given no prefetch uses. The same top-up rule as
 * DemandWindow, with a window that follows the consumer, the way TCP
 * autotunes its receive window: it starts at `initial`, doubles (up to the
 * cap) when the consumer was starved since the last top-up (it waited with
 * nothing buffered), and shrinks by a quarter (down to `minimum`) when it
 * was not and no demand is outstanding (everything requested arrived and
 * waits). The cap is min(maximum, byteBudget / element size), at least
 * `minimum`. `probe()` returns [outstanding, elementBytes] and is called
 * only at a top-up.
 */
export class AdaptiveDemand {
  constructor(probe, { initial = 16, minimum = 4, maximum = 65536, byteBudget = 8 * 1024 * 1024 } = {}) {
    if (!(0 < minimum && minimum <= initial && initial <= maximum)) {
      throw new RangeError(`need 0 < minimum <= initial <= maximum, got ${minimum}, ${initial}, ${maximum}`);
    }
    if (!(byteBudget > 0)) throw new RangeError(`byteBudget must be positive, got ${byteBudget}`);
    this.size = initial;
    this.minimum = minimum;
    this.maximum = maximum;
    this.byteBudget = byteBudget;
    this.threshold = Math.max(1, Math.floor(initial / 2));
    this.pending = 0;
    this.debt = 0;
    this._starved = false;
    this._probe = probe;
    this._elementBytes = 0;
    this.grown = 0;
    this.shrunk = 0;
  }
  get initial() {
    return this.size;
  }
  /** The consumer waited with nothing buffered. */
  starved() {
    this._starved = true;
  }
  /** Record `n` consumed elements; returns how many to request now (often 0). */
  consumed(n) {
    const pending = this.pending + n;
    if (pending < this.threshold) {
      this.pending = pending;
      return 0;
    }
    this.pending = 0;
    const [outstanding, elementBytes] = this._probe();
    if (elementBytes > 0) this._elementBytes = elementBytes;
    let cap = this.maximum;
    if (this._elementBytes > 0) cap = Math.max(this.minimum, Math.min(cap, Math.floor(this.byteBudget / this._elementBytes)));
    const old = this.size;
    let next = old;
    if (this._starved) next = Math.min(old * 2, cap);
    else if (outstanding === 0) next = Math.max(this.minimum, old - Math.floor(old / 4));
    next = Math.max(this.minimum, Math.min(next, cap));
    this._starved = false;
    if (next > old) this.grown += 1;
    else if (next < old) this.shrunk += 1;
    this.size = next;
    this.threshold = Math.max(1, Math.floor(next / 2));
    const more = pending + (next - old) - this.debt;
    if (more <= 0) {
      this.debt = -more;
      return 0;
    }
    this.debt = 0;
    return more;
  }
}
