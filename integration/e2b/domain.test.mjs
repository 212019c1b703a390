// Drives a Corral daemon through the official E2B SDK in domain mode,
// configured as an E2B user would: E2B_DOMAIN (here "e2b.test:PORT", the
// daemon's [e2b] domain) and E2B_API_KEY. The SDK calls the control plane
// at https://api.{domain} and reaches each sandbox at
// https://{port}-{sandboxID}.{domain}, with the domain create answers.
// The daemon serves
// HTTPS with a certificate the test made (NODE_EXTRA_CA_CERTS trusts it),
// and names under CORRAL_E2B_RESOLVE resolve to 127.0.0.1 in this process
// only, so no DNS server is needed. integration/e2b_domain_test.go starts
// the daemon and runs this file.
import { test, after } from 'node:test'
import dns from 'node:dns'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const suffix = '.' + process.env.CORRAL_E2B_RESOLVE
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') [cb, opts] = [opts, {}]
  if (typeof host === 'string' && host.endsWith(suffix)) {
    const all = typeof opts === 'object' && opts?.all
    return process.nextTick(() => (all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)))
  }
  return lookup.call(this, host, opts, cb)
}

const template = process.env.CORRAL_E2B_TEMPLATE || 'base'
const made = []

async function create(opts = {}) {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000, ...opts })
  made.push(sbx.sandboxId)
  return sbx
}

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

// serve starts a web server on port 8000 in the sandbox serving /tmp/www
// and resolves once it listens (it says so on stdout).
async function serve(sbx) {
  await sbx.files.write('/tmp/www/index.html', 'hello from the box')
  let ready
  const listening = new Promise((r) => (ready = r))
  await sbx.commands.run(
    "python3 -c \"import http.server as h, os; os.chdir('/tmp/www'); s = h.ThreadingHTTPServer(('127.0.0.1', 8000), h.SimpleHTTPRequestHandler); print('ready', flush=True); s.serve_forever()\"",
    { background: true, onStdout: (d) => d.includes('ready') && ready() },
  )
  await listening
}

test('domain mode: commands, files and a port by host name over HTTPS', async () => {
  const sbx = await create()
  assert.equal(sbx.sandboxDomain, process.env.CORRAL_E2B_DOMAIN, 'the domain create answered')
  assert.equal(sbx.getHost(8000), `8000-${sbx.sandboxId}.${process.env.CORRAL_E2B_DOMAIN}`)
  const r = await sbx.commands.run('echo "$((6 * 7))"')
  assert.equal(r.stdout, '42\n')
  await serve(sbx)
  assert.equal(await sbx.files.read('/tmp/www/index.html'), 'hello from the box')

  // A port is public, as in E2B (the sandbox did not ask otherwise).
  const res = await fetch(`https://${sbx.getHost(8000)}/index.html`)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'hello from the box')

  // Signed URLs reach the agent by host name too.
  const down = await fetch(await sbx.downloadUrl('/tmp/www/index.html'))
  assert.equal(await down.text(), 'hello from the box')

  // envd's port without the access token is refused.
  const bare = await fetch(`https://${sbx.getHost(49983)}/health`)
  assert.equal(bare.status, 401)

  // Paused, the sandbox answers neither on envd nor on its ports.
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.isRunning(), false)
  assert.equal((await fetch(`https://${sbx.getHost(8000)}/index.html`)).status, 502)
  await Sandbox.connect(sbx.sandboxId)
  assert.equal(await sbx.isRunning(), true)
})

test('domain mode: allowPublicTraffic false needs the traffic token', async () => {
  const sbx = await create({ network: { allowPublicTraffic: false, maskRequestHost: 'localhost:${PORT}' } })
  assert.ok(sbx.trafficAccessToken, 'create answers a traffic access token')
  const info = await sbx.getInfo()
  assert.equal(info.network?.allowPublicTraffic, false)
  assert.equal(info.network?.maskRequestHost, 'localhost:${PORT}')
  await serve(sbx)
  const url = `https://${sbx.getHost(8000)}/index.html`
  assert.equal((await fetch(url)).status, 403)
  assert.equal((await fetch(url, { headers: { 'E2B-Traffic-Access-Token': 'wrong' } })).status, 403)
  const ok = await fetch(url, { headers: { 'E2B-Traffic-Access-Token': sbx.trafficAccessToken } })
  assert.equal(ok.status, 200)
  assert.equal(await ok.text(), 'hello from the box')
})

test('domain mode: autoResume resumes a paused sandbox on traffic', async () => {
  const sbx = await create({ lifecycle: { onTimeout: 'pause', autoResume: true } })
  assert.equal((await sbx.getInfo()).lifecycle?.autoResume, true)
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  const r = await sbx.commands.run('echo back')
  assert.equal(r.stdout, 'back\n')
  assert.equal((await sbx.getInfo()).state, 'running')
})
