// What the demo pages (index.html, pipeline.html) share: not part of the
// client's API (that is rstreams.js), only the pages' own plumbing, so that
// the two stay alike without two copies.

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/**
 * Where a page's session goes: `?ws=ws://host:port/` if given, otherwise the
 * server that served the page (wss:// when the page came over https).
 */
export function sessionUrl(params) {
  return params.get("ws") || `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/`;
}

/**
 * Size a canvas's backing store to its CSS size at the screen's pixel ratio
 * (sharp on HiDPI screens), and clear it. Returns the 2D context, scaled so
 * that drawing is in CSS pixels, and the width and height in CSS pixels.
 */
export function fitCanvas(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}
