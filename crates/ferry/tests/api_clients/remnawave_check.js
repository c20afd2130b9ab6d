// Drives Ferry's API with Remnawave's client library (@remnawave/xtls-sdk 0.8.0, nice-grpc) as
// Remnawave's node does: users added (VLESS, Trojan, Shadowsocks, Shadowsocks 2022), listed and counted, traffic
// read per user and for all users with reset, online status, system stats, users removed.
// Exits non-zero (with the reason) on any mismatch.
//
// Usage: node remnawave_check.js API_PORT PORTS_JSON  (PORTS_JSON: {"vl": port, "tr": ..., "ss": ...})
const net = require('net');
const { XtlsApi } = require('@remnawave/xtls-sdk');

const API = process.argv[2];
const PORTS = JSON.parse(process.argv[3]);

function fail(msg) {
  console.log('FAIL:', msg);
  process.exit(1);
}

function echo(port, data, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const chunks = [];
    let n = 0;
    const done = (v) => { clearTimeout(t); s.destroy(); resolve(v); };
    const t = setTimeout(() => done(null), timeoutMs);
    s.on('connect', () => s.write(data));
    s.on('data', (b) => { chunks.push(b); n += b.length; if (n >= data.length) done(Buffer.concat(chunks)); });
    s.on('error', () => done(null));
    s.on('close', () => done(n >= data.length ? Buffer.concat(chunks) : null));
  });
}

(async () => {
  const api = new XtlsApi('127.0.0.1', API);
  const h = api.handler;
  let r = await h.addVlessUser({ tag: 'vl', username: 'rw-vl', uuid: '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d', flow: '', level: 0 });
  if (!r.isOk || !r.data.isAdded) fail('addVlessUser: ' + JSON.stringify(r));
  r = await h.addTrojanUser({ tag: 'tr', username: 'rw-tr', password: 'trojan-pw', level: 0 });
  if (!r.isOk || !r.data.isAdded) fail('addTrojanUser: ' + JSON.stringify(r));
  r = await h.addShadowsocksUser({ tag: 'ss', username: 'rw-ss', password: 'ss-pw', cipherType: 5, ivCheck: false, level: 0 });
  if (!r.isOk || !r.data.isAdded) fail('addShadowsocksUser: ' + JSON.stringify(r));
  r = await h.addShadowsocks2022User({ tag: 's22', username: 'rw-22', key: 'YWJjZGVmZ2hpamtsbW5vcA==', level: 0 });
  if (!r.isOk || !r.data.isAdded) fail('addShadowsocks2022User: ' + JSON.stringify(r));
  // Again: Xray's "already exists" text makes the SDK answer "not added".
  r = await h.addVlessUser({ tag: 'vl', username: 'rw-vl', uuid: '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4e', flow: '', level: 0 });
  if (r.isOk && r.data.isAdded) fail('a duplicate user was added: ' + JSON.stringify(r));

  const users = await h.getInboundUsers('vl');
  if (!users.isOk || users.data.users.length !== 1 || users.data.users[0].username !== 'rw-vl'
      || users.data.users[0].protocol !== 'vless'
      || users.data.users[0].vless.id !== '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d') {
    fail('getInboundUsers: ' + JSON.stringify(users));
  }
  const u22 = await h.getInboundUsers('s22');
  if (!u22.isOk || u22.data.users.length !== 2 || u22.data.users.some((u) => u.protocol !== 'shadowsocks2022')) {
    fail('getInboundUsers (2022): ' + JSON.stringify(u22));
  }
  const count = await h.getInboundUsersCount('tr');
  if (!count.isOk || count.data !== 1) fail('getInboundUsersCount: ' + JSON.stringify(count));

  const off = await api.stats.getUserOnlineStatus('rw-vl');
  if (!off.isOk || off.data.online) fail('online before any connection: ' + JSON.stringify(off));

  const data = Buffer.alloc(40000, 7);
  for (const tag of ['vl', 'tr', 'ss', 's22']) {
    const got = await echo(PORTS[tag], data);
    if (!got || !got.equals(data)) fail('no echo through ' + tag);
  }
  const st = await api.stats.getUserStats('rw-tr');
  if (!st.isOk || !st.data.user || st.data.user.uplink !== 40000 || st.data.user.downlink !== 40000) {
    fail('getUserStats: ' + JSON.stringify(st));
  }
  const all = await api.stats.getAllUsersStats(true);
  const names = all.isOk ? all.data.users.map((u) => u.username).sort() : [];
  if (JSON.stringify(names) !== JSON.stringify(['rw-22', 'rw-ss', 'rw-tr', 'rw-vl'])) fail('getAllUsersStats: ' + JSON.stringify(all));
  const again = await api.stats.getUserStats('rw-ss');
  if (!again.isOk || (again.data.user && (again.data.user.uplink || again.data.user.downlink))) {
    fail('reset did not zero: ' + JSON.stringify(again));
  }
  const inb = await api.stats.getAllInboundsStats();
  if (!inb.isOk || inb.data.inbounds.length < 3) fail('getAllInboundsStats: ' + JSON.stringify(inb));
  const sys = await api.stats.getSysStats();
  if (!sys.isOk || !(sys.data.numGoroutine > 0)) fail('getSysStats: ' + JSON.stringify(sys));

  r = await h.removeUser('vl', 'rw-vl');
  if (!r.isOk || !r.data.isDeleted) fail('removeUser: ' + JSON.stringify(r));
  r = await h.removeUser('vl', 'rw-vl');
  if (r.isOk && r.data.isDeleted) fail('removed a missing user: ' + JSON.stringify(r));
  const refused = await echo(PORTS.vl, data, 2000);
  if (refused && refused.equals(data)) fail('a removed user still gets through');
  console.log('OK');
  process.exit(0);
})().catch((e) => fail(e && e.stack ? e.stack : String(e)));
