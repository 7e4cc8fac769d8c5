// Driver for node's memcache clients (the JSON line protocol described in
// tests/clients/clientmatrix.py): one request per line on stdin, one reply
// per line on stdout, requests handled one at a time in order.
//
//   node node_driver.js LIB HOST:PORT [timeout_ms=N] [values=buffer]
//
// LIB is memcached (text protocol) or memjs (binary protocol).  memcached
// carries strings: bodies are sent as UTF-8 text, or as Buffers with
// values=buffer (the library then sets flag 4 and re-encodes the bytes).
// timeout_ms replaces the client's timeout (memcached: `idle`, 5 s, the
// socket's inactivity timeout; memjs: `timeout`, 0.5 s, per request, with
// `retries` 2, so a timed-out request is sent a second time).
'use strict';
const path = require('path');
const readline = require('readline');
const modules = path.join(__dirname, '..', 'node_modules');

const [lib, addr, ...rest] = process.argv.slice(2);
const opt = Object.fromEntries(rest.map((a) => a.split(/=(.*)/s).slice(0, 2)));
const hexof = (v) => (v === null || v === undefined ? null
  : (Buffer.isBuffer(v) ? v : Buffer.from(String(v), 'utf8')).toString('hex'));
let c;

if (lib === 'memcached') {
  const Memcached = require(path.join(modules, 'memcached'));
  const o = { retries: 0, failures: 0 };
  if (opt.timeout_ms) o.idle = o.timeout = +opt.timeout_ms;
  const m = new Memcached(addr, o);
  const value = (hex) => (opt.values === 'buffer' ? Buffer.from(hex, 'hex')
    : Buffer.from(hex, 'hex').toString('utf8'));
  const p = (f) => new Promise((res, rej) => f((err, r) => (err ? rej(err) : res(r))));
  c = {
    set: (k, hex) => p((cb) => m.set(k, value(hex), 0, cb)),
    get: (k) => p((cb) => m.get(k, cb)).then(hexof),
    mget: (ks) => p((cb) => m.getMulti(ks, cb)).then((r) =>
      Object.fromEntries(Object.entries(r || {}).map(([k, v]) => [k, hexof(v)]))),
    version: () => p((cb) => m.version(cb)).then((r) => r[0].version),
    stats: () => p((cb) => m.stats(cb)).then((r) =>
      Object.fromEntries(Object.entries(r[0]).map(([k, v]) => [k, String(v)]))),
  };
} else if (lib === 'memjs') {
  const memjs = require(path.join(modules, 'memjs'));
  const o = { logger: { log: () => {} } };
  if (opt.timeout_ms) o.timeout = opt.timeout_ms / 1000;
  const m = memjs.Client.create(addr, o);
  c = {
    set: (k, hex) => m.set(k, Buffer.from(hex, 'hex'), {}),
    get: (k) => m.get(k).then((r) => hexof(r.value)),
    mget: () => Promise.reject(new Error('memjs has no multi-key get')),
    version: () => Promise.reject(new Error('memjs has no version call')),
    stats: () => new Promise((res, rej) => m.stats((err, server, st) =>
      (err ? rej(err) : res(Object.fromEntries(Object.entries(st).map(([k, v]) => [k, String(v)])))))),
  };
} else {
  process.stderr.write(`unknown library ${lib}\n`);
  process.exit(2);
}

const ops = {
  set: (r) => c.set(r[1], r[2]),
  get: (r) => c.get(r[1]),
  mget: (r) => c.mget(r[1]),
  version: () => c.version(),
  stats: () => c.stats(),
};

// Requests run strictly one after another, like the other drivers.
let chain = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  chain = chain.then(async () => {
    let out;
    try {
      const req = JSON.parse(line);
      if (!ops[req[0]]) throw new Error(`unknown op ${req[0]}`);
      out = { r: await ops[req[0]](req) };
    } catch (e) {
      out = { err: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  });
});
rl.on('close', () => chain.then(() => process.exit(0)));
