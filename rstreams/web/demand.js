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
