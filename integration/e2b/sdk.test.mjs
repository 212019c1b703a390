// Drives a Corral daemon through the official E2B SDK, configured only by
// the environment, as docs/e2b.md tells a user to:
//   E2B_API_URL, E2B_SANDBOX_URL (the daemon's TCP listener), E2B_API_KEY
//   (its token); CORRAL_E2B_TEMPLATE names the image to create from.
// integration/e2b_test.go starts the daemon and runs this file.
import { test, after } from 'node:test'
import { gzipSync } from 'node:zlib'
import assert from 'node:assert/strict'
import { Sandbox, Secret, Volume, CommandExitError, SandboxNotFoundError, FilesystemEventType, ALL_TRAFFIC } from 'e2b'

const template = process.env.CORRAL_E2B_TEMPLATE || 'base'
const run = Math.random().toString(36).slice(2, 10)
const made = []
const volumeName = `vol-${run}`

// until polls cond (a watch event, a line of output) without a fixed sleep.
async function until(what, cond, ms = 30_000) {
  const end = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

async function create(opts = {}) {
  const sbx = await Sandbox.create(template, { timeoutMs: 120_000, ...opts })
  made.push(sbx.sandboxId)
  return sbx
}

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
  await Volume.destroy(volumeName).catch(() => {})
})

test('lifecycle: create with envs, metadata and timeout; getInfo; list; setTimeout; connect; kill', async () => {
  const sbx = await create({ envs: { GREETING: 'hello e2b' }, metadata: { run, role: 'first' }, timeoutMs: 60_000 })
  await create({ metadata: { run, role: 'second' } })

  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, template)
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { run, role: 'first' })
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 30_000 && left <= 61_000, `endAt is ${left} ms away; want about 60 s`)

  const env = await sbx.commands.run('echo "$GREETING"')
  assert.equal(env.stdout, 'hello e2b\n')

  // The metadata filter finds each box by its own labels.
  const page = await Sandbox.list({ query: { metadata: { run, role: 'first' } } }).nextItems()
  assert.deepEqual(page.map((s) => s.sandboxId), [sbx.sandboxId])
  const both = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
  assert.equal(both.length, 2)

  // Pagination: one per page, following X-Next-Token.
  const pager = Sandbox.list({ query: { metadata: { run } }, limit: 1 })
  const seen = []
  while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId))
  assert.equal(new Set(seen).size, 2)

  await sbx.setTimeout(300_000)
  const later = (await sbx.getInfo()).endAt.getTime() - Date.now()
  assert.ok(later > 250_000, `after setTimeout(300 s) endAt is ${later} ms away`)

  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.commands.run('echo connected')).stdout, 'connected\n')

  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.kill(), true)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill finds nothing')
  assert.equal(await sbx.isRunning(), false, 'isRunning of a killed sandbox')
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('create: the default template', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  made.push(sbx.sandboxId)
  assert.equal((await sbx.getInfo()).templateId, 'base')
})

test('create: an unknown template is an error', async () => {
  await assert.rejects(Sandbox.create(`no-such-template-${run}`), /404/)
})

test('commands: stdout, stderr, exit codes', async () => {
  const sbx = await create()
  const ok = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(ok.exitCode, 0)
  assert.equal(ok.stdout, 'out\n')
  assert.equal(ok.stderr, 'err\n')

  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    return true
  })

  const chunks = []
  await sbx.commands.run('for i in 1 2 3; do echo line$i; done', { onStdout: (d) => chunks.push(d) })
  assert.equal(chunks.join(''), 'line1\nline2\nline3\n')
})

test('files: write, read, list', async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/e2b/hello.txt', 'hello from the sdk')
  assert.equal(await sbx.files.read('/tmp/e2b/hello.txt'), 'hello from the sdk')
  const bytes = await sbx.files.read('/tmp/e2b/hello.txt', { format: 'bytes' })
  assert.equal(Buffer.from(bytes).toString(), 'hello from the sdk')
  const entries = await sbx.files.list('/tmp/e2b')
  assert.deepEqual(entries.map((e) => e.name), ['hello.txt'])
  assert.equal(entries[0].type, 'file')
  assert.equal(await sbx.files.exists('/tmp/e2b/hello.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/e2b/missing'), false)
  assert.equal((await sbx.commands.run('cat /tmp/e2b/hello.txt')).stdout, 'hello from the sdk')
})

test('pause and connect: a paused sandbox is not running until connect resumes it', async () => {
  const sbx = await create()
  await sbx.commands.run('echo before > /tmp/state')
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'pausing a paused sandbox')
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await sbx.isRunning(), false, 'isRunning of a paused sandbox')
  const paused = await Sandbox.list({ query: { metadata: {}, state: ['paused'] } }).nextItems()
  assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId), 'the paused sandbox is listed as paused')

  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(await back.isRunning(), true)
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal((await back.commands.run('cat /tmp/state')).stdout, 'before\n')
})

test('auth: the data plane needs the sandbox access token', async () => {
  const sbx = await create()
  const url = process.env.E2B_SANDBOX_URL
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' }
  const without = await fetch(`${url}/health`, { headers })
  assert.equal(without.status, 401)
  const wrong = await fetch(`${url}/health`, { headers: { ...headers, 'X-Access-Token': 'wrong' } })
  assert.equal(wrong.status, 401)
  const right = await fetch(`${url}/health`, { headers: { ...headers, 'X-Access-Token': sbx.envdAccessToken } })
  assert.equal(right.status, 204, 'the agent answers with the right token')
  const api = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes`)
  assert.equal(api.status, 401, 'the control plane without an API key')
})

test('files: write many with directories, read text, bytes and stream', async () => {
  const sbx = await create()
  const written = await sbx.files.write([
    { path: '/tmp/many/a.txt', data: 'first' },
    { path: '/tmp/many/sub/deeper/b.txt', data: 'second' },
    { path: '/tmp/other/c.bin', data: new Uint8Array([0, 1, 2, 255]) },
  ])
  assert.deepEqual(written.map((w) => w.path).sort(), ['/tmp/many/a.txt', '/tmp/many/sub/deeper/b.txt', '/tmp/other/c.bin'])
  assert.equal(await sbx.files.read('/tmp/many/sub/deeper/b.txt'), 'second')
  assert.deepEqual([...(await sbx.files.read('/tmp/other/c.bin', { format: 'bytes' }))], [0, 1, 2, 255])
  const stream = await sbx.files.read('/tmp/many/a.txt', { format: 'stream' })
  const chunks = []
  for await (const c of stream) chunks.push(Buffer.from(c))
  assert.equal(Buffer.concat(chunks).toString(), 'first')
  assert.equal(await sbx.files.read('/tmp/many/a.txt', { gzip: true }), 'first', 'a gzip-encoded download')

  const deep = await sbx.files.list('/tmp/many', { depth: 3 })
  assert.deepEqual(deep.map((e) => e.path).sort(), ['/tmp/many/a.txt', '/tmp/many/sub', '/tmp/many/sub/deeper', '/tmp/many/sub/deeper/b.txt'])
  const sub = deep.find((e) => e.path === '/tmp/many/sub')
  assert.equal(sub.type, 'dir')
})

test('files: octet-stream and gzip uploads, a 5 MB file', async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/up/gz.txt', 'gzip me '.repeat(1000), { gzip: true })
  assert.equal(await sbx.files.read('/tmp/up/gz.txt'), 'gzip me '.repeat(1000), 'stored decoded')
  await sbx.files.write('/tmp/up/octet.txt', 'raw body', { useOctetStream: true })
  assert.equal(await sbx.files.read('/tmp/up/octet.txt'), 'raw body')

  const big = Buffer.alloc(5 * 1024 * 1024)
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 12)) & 0xff
  const info = await sbx.files.write('/tmp/up/big.bin', big)
  assert.equal(info.path, '/tmp/up/big.bin')
  assert.equal((await sbx.files.getInfo('/tmp/up/big.bin')).size, big.length)
  const back = await sbx.files.read('/tmp/up/big.bin', { format: 'bytes' })
  assert.ok(Buffer.from(back).equals(big), 'the 5 MB file reads back the same')
  const sum = (await sbx.commands.run('sha256sum /tmp/up/big.bin')).stdout.split(' ')[0]
  const { createHash } = await import('node:crypto')
  assert.equal(sum, createHash('sha256').update(big).digest('hex'))

  // The raw route as a client without the SDK uses it.
  const url = `${process.env.E2B_SANDBOX_URL}/files?path=${encodeURIComponent('/tmp/up/curl.txt')}`
  const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sbx.envdAccessToken }
  const res = await fetch(url, { method: 'POST', body: gzipSync('by fetch'), headers: { ...headers, 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' } })
  assert.equal(res.status, 200, await res.text())
  assert.equal(await sbx.files.read('/tmp/up/curl.txt'), 'by fetch')
})

test('files: exists, getInfo, rename, makeDir, remove, symlinks', async () => {
  const sbx = await create()
  assert.equal(await sbx.files.makeDir('/tmp/fs/dir/sub'), true)
  assert.equal(await sbx.files.makeDir('/tmp/fs/dir/sub'), false, 'makeDir of an existing directory')
  await sbx.commands.run('chmod 0750 /tmp/fs/dir')
  const dir = await sbx.files.getInfo('/tmp/fs/dir')
  assert.equal(dir.type, 'dir')
  assert.equal(dir.mode, 0o750, `mode ${dir.mode.toString(8)}`)
  assert.equal(dir.permissions, 'drwxr-x---')
  assert.equal(dir.name, 'dir')

  await sbx.files.write('/tmp/fs/dir/f.txt', 'x')
  const moved = await sbx.files.rename('/tmp/fs/dir/f.txt', '/tmp/fs/moved/g.txt')
  assert.equal(moved.path, '/tmp/fs/moved/g.txt')
  assert.equal(moved.type, 'file')
  assert.equal(await sbx.files.exists('/tmp/fs/dir/f.txt'), false)
  assert.equal(await sbx.files.exists('/tmp/fs/moved/g.txt'), true)

  await sbx.commands.run('ln -s moved/g.txt /tmp/fs/link && ln -s /tmp/fs/dir /tmp/fs/dirlink')
  const link = await sbx.files.getInfo('/tmp/fs/link')
  assert.equal(link.symlinkTarget, '/tmp/fs/moved/g.txt', 'the resolved, absolute target')
  assert.equal(link.type, 'file', "a link is described by its target's type, as envd does")
  const dirlink = await sbx.files.getInfo('/tmp/fs/dirlink')
  assert.equal(dirlink.symlinkTarget, '/tmp/fs/dir')
  assert.equal(dirlink.type, 'dir')

  await sbx.files.remove('/tmp/fs/moved')
  assert.equal(await sbx.files.exists('/tmp/fs/moved'), false)
  await sbx.files.remove('/tmp/fs/never-there') // a missing path is no error
})

test('files: metadata', async () => {
  const sbx = await create()
  const info = await sbx.files.write('/tmp/meta/m.txt', 'with metadata', { metadata: { owner: 'ann', stage: 'draft' } })
  assert.deepEqual(info.metadata, { owner: 'ann', stage: 'draft' })
  assert.deepEqual((await sbx.files.getInfo('/tmp/meta/m.txt')).metadata, { owner: 'ann', stage: 'draft' })
  const [entry] = await sbx.files.list('/tmp/meta')
  assert.deepEqual(entry.metadata, { owner: 'ann', stage: 'draft' })
  await sbx.files.write('/tmp/meta/m.txt', 'again')
  assert.equal((await sbx.files.getInfo('/tmp/meta/m.txt')).metadata, undefined, 'a write without metadata clears it')
})

test('files: watchDir', async () => {
  const sbx = await create()
  await sbx.files.makeDir('/tmp/watched/sub')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched', (e) => events.push(e), { recursive: true, includeEntry: true })
  try {
    await sbx.files.write('/tmp/watched/new.txt', 'hello')
    await sbx.files.write('/tmp/watched/sub/deep.txt', 'deeper')
    await until('watch events', () =>
      events.some((e) => e.name === 'new.txt') && events.some((e) => e.name === 'sub/deep.txt'))
    const created = events.find((e) => e.name === 'new.txt' && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.WRITE))
    assert.ok(created, `events ${JSON.stringify(events)}`)
    await sbx.files.remove('/tmp/watched/new.txt')
    await until('a remove event', () => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.REMOVE))
  } finally {
    await handle.stop()
  }
})

test('commands: background, connect by pid, sendStdin, list, kill', async () => {
  const sbx = await create()
  const first = []
  const bg = await sbx.commands.run('while read line; do echo "got $line"; done', {
    background: true, stdin: true, onStdout: (d) => first.push(d),
  })
  assert.ok(bg.pid > 0)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === bg.pid), `list ${JSON.stringify(listed)} has ${bg.pid}`)

  await sbx.commands.sendStdin(bg.pid, 'one\n')
  await until('echo of one', () => first.join('').includes('got one'))

  const second = []
  const again = await sbx.commands.connect(bg.pid, { onStdout: (d) => second.push(d) })
  await sbx.commands.sendStdin(bg.pid, 'two\n')
  await until('echo of two on the connected handle', () => second.join('').includes('got two'))

  await sbx.commands.closeStdin(bg.pid)
  const res = await again.wait()
  assert.equal(res.exitCode, 0)

  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  assert.equal(await sbx.commands.kill(sleeper.pid), true)
  await assert.rejects(sleeper.wait(), CommandExitError)
  assert.equal(await sbx.commands.kill(sleeper.pid), false, 'kill of a gone pid')
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === sleeper.pid))
})

test('pty: create, input, resize, kill', async () => {
  const sbx = await create()
  const out = []
  const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => out.push(Buffer.from(d).toString()) })
  const enc = new TextEncoder()
  await sbx.pty.sendInput(term.pid, enc.encode('stty size; echo marker-$((6*7))\n'))
  await until('the first size', () => out.join('').includes('24 80') && out.join('').includes('marker-42'))
  await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
  await until('the new size', () => out.join('').includes('40 120'))
  assert.equal(await sbx.pty.kill(term.pid), true)
  await assert.rejects(term.wait())
})

test('fork: copies with their own IDs and tokens, and the files', async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/forked.txt', 'from the source')
  const forks = await sbx.fork({ count: 2, timeoutMs: 60_000 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `fork result ${f}`)
    made.push(f.sandboxId)
    assert.notEqual(f.sandboxId, sbx.sandboxId)
    assert.notEqual(f.envdAccessToken, sbx.envdAccessToken)
    assert.equal(await f.files.read('/tmp/forked.txt'), 'from the source')
    const left = (await f.getInfo()).endAt.getTime() - Date.now()
    assert.ok(left > 30_000 && left <= 61_000, `a fork's endAt is ${left} ms away; want about 60 s`)
  }
  await forks[0].files.write('/tmp/forked.txt', 'changed in a fork')
  assert.equal(await sbx.files.read('/tmp/forked.txt'), 'from the source', 'a fork writes to its own copy')
  await assert.rejects(Sandbox.fork(`gone${run}`), SandboxNotFoundError)
})

test('snapshots: create, list, create from, delete', async () => {
  const sbx = await create()
  await sbx.files.write('/tmp/snap.txt', 'in the snapshot')
  const name = `snap-${run}`
  const snap = await sbx.createSnapshot({ name })
  assert.deepEqual(snap, { snapshotId: name, names: [name] })
  const mine = await sbx.listSnapshots().nextItems()
  assert.deepEqual(mine.map((s) => s.snapshotId), [name])
  const all = await Sandbox.listSnapshots().nextItems()
  assert.ok(all.some((s) => s.snapshotId === name))

  const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  made.push(copy.sandboxId)
  assert.equal(await copy.files.read('/tmp/snap.txt'), 'in the snapshot')
  await copy.kill()

  const unnamed = await sbx.createSnapshot()
  assert.match(unnamed.snapshotId, /^snapshot-[0-9a-f]{12}$/)
  assert.equal(await Sandbox.deleteSnapshot(unnamed.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(name), true)
  assert.equal(await Sandbox.deleteSnapshot(name), false, 'a deleted snapshot is not found')
  assert.deepEqual(await sbx.listSnapshots().nextItems(), [])
})

test('network: updateNetwork replaces the egress policy', async () => {
  const sbx = await create({ allowInternetAccess: false })
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  await sbx.updateNetwork({ allowOut: ['example.com'], denyOut: [ALL_TRAFFIC] })
  const info = await sbx.getInfo()
  assert.deepEqual(info.network?.allowOut, ['example.com'])
  await sbx.updateNetwork({ allowInternetAccess: false })
  assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  await assert.rejects(sbx.updateNetwork({ denyOut: ['10.0.0.0/8'] }), /allowlist/)
  await assert.rejects(Sandbox.updateNetwork(`gone${run}`, {}), SandboxNotFoundError)
})

test('secrets: create, getInfo, list, update, destroy; never the value', async () => {
  const name = `e2b-test-${run}`
  const created = await Secret.create(name, 'value-one')
  assert.equal(created.secretId, name.toUpperCase().replaceAll('-', '_'))
  assert.equal(created.version, 1)
  assert.ok(!JSON.stringify(created).includes('value-one'))
  await assert.rejects(Secret.create(name, 'again'), /already exists/)
  assert.equal((await Secret.getInfo(name)).secretId, created.secretId)
  assert.equal(await Secret.exists(name), true)
  const listed = []
  const pager = Secret.list({ limit: 1 })
  while (pager.hasNext) listed.push(...(await pager.nextItems()))
  assert.ok(listed.some((s) => s.secretId === created.secretId))
  assert.ok(!JSON.stringify(listed).includes('value-one'))
  await Secret.update(name, 'value-two')
  assert.equal(await Secret.destroy(name), true)
  assert.equal(await Secret.destroy(name), false)
  assert.equal(await Secret.exists(name), false)
})

test('volumes: create, list, getInfo, mount in two sandboxes, destroy', async () => {
  const vol = await Volume.create(volumeName)
  assert.equal(vol.volumeId, volumeName)
  assert.ok((await Volume.list()).some((v) => v.volumeId === volumeName))
  assert.equal((await Volume.getInfo(volumeName)).name, volumeName)
  const a = await create({ volumeMounts: { '/data': vol } })
  await a.files.write('/data/note', 'shared')
  const b = await create({ volumeMounts: { '/mnt/v': volumeName } })
  assert.equal(await b.files.read('/mnt/v/note'), 'shared')
  await assert.rejects(Volume.destroy(volumeName), /used by sandbox/)
  await a.kill()
  await b.kill()
  assert.equal(await Volume.destroy(volumeName), true)
  assert.equal(await Volume.destroy(volumeName), false)
})

test('signed URLs: uploadUrl and downloadUrl work without headers, for their path, until they expire', async () => {
  const sbx = await create()
  const up = await sbx.uploadUrl('/tmp/signed/up.txt')
  assert.match(up, /[?&]signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['uploaded by url']), 'up.txt')
  const put = await fetch(up, { method: 'POST', body: form })
  assert.equal(put.status, 200, await put.text())
  assert.equal(await sbx.files.read('/tmp/signed/up.txt'), 'uploaded by url')

  const down = await sbx.downloadUrl('/tmp/signed/up.txt', { useSignatureExpiration: 60 })
  assert.match(down, /signature_expiration=\d+/)
  const got = await fetch(down)
  assert.equal(got.status, 200)
  assert.equal(await got.text(), 'uploaded by url')

  // A read signature does not write, nor read another path; an expired one does nothing.
  assert.equal((await fetch(down, { method: 'POST', body: form })).status, 401)
  const other = new URL(down)
  other.searchParams.set('path', '/etc/passwd')
  assert.equal((await fetch(other)).status, 401)
  const expired = await sbx.downloadUrl('/tmp/signed/up.txt', { useSignatureExpiration: -10 })
  const late = await fetch(expired)
  assert.equal(late.status, 401)
  assert.match((await late.json()).message, /expired/)
})

// Sandbox metrics (i25-metrics): served from the daemon's stats sampler.
test('metrics: getMetrics returns samples with the SDK fields, start and end bound them', async () => {
  const sbx = await create()
  await sbx.commands.run('head -c 8388608 /dev/zero > /tmp/disk-fill')
  let metrics = []
  await until('a metrics sample', async () => {
    metrics = await sbx.getMetrics()
    return metrics.length > 0
  })
  const m = metrics[metrics.length - 1]
  assert.ok(m.timestamp instanceof Date && !Number.isNaN(m.timestamp.getTime()), 'timestamp is a date')
  assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
  assert.ok(m.cpuUsedPct >= 0, `cpuUsedPct ${m.cpuUsedPct}`)
  assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, `memUsed ${m.memUsed} of ${m.memTotal}`)
  assert.ok(m.memCache >= 0, `memCache ${m.memCache}`)
  assert.ok(m.diskUsed >= 8388608 && m.diskTotal > m.diskUsed, `diskUsed ${m.diskUsed} of ${m.diskTotal}`)

  const later = await sbx.getMetrics({ start: new Date(m.timestamp.getTime() + 3_600_000) })
  assert.equal(later.length, 0, 'no sample after start')
  const upto = await sbx.getMetrics({ end: new Date(m.timestamp.getTime()) })
  assert.ok(upto.length >= 1 && upto.every((x) => x.timestamp <= m.timestamp), 'samples up to end')
  await assert.rejects(Sandbox.getMetrics('nosuchsandbox'), SandboxNotFoundError)
})
