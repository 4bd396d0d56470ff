// The client as an npm package (rstreams/web/package.json, @rstreams/client):
// its hand-written types declare every name rstreams.js exports, its exports
// map points at files that exist and resolves from another package, its
// version is the Python package's, and `npm pack` ships the client's modules
// and nothing of the server's pages.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

import * as api from "../../rstreams/web/rstreams.js";
import { ROOT } from "../helpers.mjs";

const WEB = path.join(ROOT, "rstreams", "web");
const PACKAGE = JSON.parse(readFileSync(path.join(WEB, "package.json"), "utf-8"));
const TYPES = readFileSync(path.join(WEB, "rstreams.d.ts"), "utf-8");

// Top-level declarations of the .d.ts: values (class, function, const) and types.
function declared(kinds) {
  const pattern = new RegExp(`^export (?:declare )?(?:${kinds}) ([A-Za-z_$][\\w$]*)`, "gm");
  return new Set([...TYPES.matchAll(pattern)].map((m) => m[1]));
}

// The relative imports of a module, followed transitively from rstreams.js.
function moduleGraph(start) {
  const seen = new Set();
  const visit = (name) => {
    if (seen.has(name)) return;
    seen.add(name);
    const source = readFileSync(path.join(WEB, name), "utf-8");
    for (const m of source.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+"\.\/([^"]+)"/gms)) visit(m[1]);
  };
  visit(start);
  return seen;
}

test("the .d.ts declares every name rstreams.js exports, and no value it does not", () => {
  const values = declared("class|function|const");
  const exported = Object.keys(api);
  assert.deepStrictEqual(exported.filter((name) => !values.has(name)), [], "exported but not declared");
  assert.deepStrictEqual([...values].filter((name) => !exported.includes(name)), [], "declared but not exported");
});

test("the .d.ts declares the options and members pages rely on", () => {
  for (const member of ["prefetch?: number | null", "keepaliveInterval?: number | null", "readonly window: number", "stats(): SubscriptionStats", "request(n: number | bigint): void", "cancel(): void", "batches(maxElements?: number)"]) {
    assert.ok(TYPES.includes(member), member);
  }
});

test("package.json: name, the Python package's version, an ES module, exports that exist", () => {
  assert.equal(PACKAGE.name, "@rstreams/client");
  const version = readFileSync(path.join(ROOT, "rstreams", "_version.py"), "utf-8").match(/__version__ = "([^"]+)"/)[1];
  assert.equal(PACKAGE.version, version);
  assert.equal(PACKAGE.type, "module");
  const targets = [];
  const collect = (entry) => (typeof entry === "string" ? targets.push(entry) : Object.values(entry).forEach(collect));
  collect(PACKAGE.exports);
  assert.deepStrictEqual(PACKAGE.exports["."], { types: "./rstreams.d.ts", default: "./rstreams.js" });
  for (const target of [...targets, PACKAGE.main, PACKAGE.types]) {
    assert.ok(target.startsWith("./") && existsSync(path.join(WEB, target)), target);
  }
  for (const name of PACKAGE.files) assert.ok(existsSync(path.join(WEB, name)), name);
});

test("files ships every module rstreams.js imports", () => {
  assert.deepStrictEqual([...moduleGraph("rstreams.js")].filter((name) => !PACKAGE.files.includes(name)), []);
});

test("another package imports it by name through the exports map", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "rstreams-client-"));
  try {
    mkdirSync(path.join(dir, "node_modules", "@rstreams"), { recursive: true });
    symlinkSync(WEB, path.join(dir, "node_modules", "@rstreams", "client"), "dir");
    writeFileSync(path.join(dir, "probe.mjs"), 'export * as client from "@rstreams/client";\n');
    const { client } = await import(pathToFileURL(path.join(dir, "probe.mjs")).href);
    assert.equal(client.connect, api.connect);
    assert.equal(client.Session, api.Session);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const npm = spawnSync("npm", ["--version"], { encoding: "utf-8", timeout: 30_000 });

test("npm pack ships the client's modules, the types and nothing else", { skip: npm.status !== 0 && "npm not found" }, () => {
  const pack = spawnSync("npm", ["pack", "--dry-run", "--json", "--offline"], { cwd: WEB, encoding: "utf-8", timeout: 60_000 });
  assert.equal(pack.status, 0, pack.stderr);
  const [{ name, files }] = JSON.parse(pack.stdout);
  assert.equal(name, "@rstreams/client");
  const shipped = files.map((file) => file.path).sort();
  assert.deepStrictEqual(shipped, [...PACKAGE.files, "package.json"].sort());
});
