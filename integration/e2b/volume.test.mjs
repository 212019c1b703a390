// Reads and writes a volume's files through the official E2B SDK's Volume
// class (the volume content API, served by the daemon on the volume's
// files), and checks them from a box that mounts the volume.
// integration/e2b_test.go starts the daemon and runs this file.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume, VolumePathNotFoundError } from 'e2b'

const name = `it-vol-${Math.random().toString(36).slice(2, 10)}`
const made = []

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
  await Volume.destroy(name).catch(() => {})
})

test('Volume content: writeFile, readFile, list, makeDir, getInfo, remove, seen from a box as its root', async () => {
  const vol = await Volume.create(name)
  await vol.makeDir('/cfg/deep', { force: true })
  const w = await vol.writeFile('/cfg/app.conf', 'port=8000\n')
  assert.equal(w.type, 'file')
  assert.equal(w.size, 10)
  assert.equal(await vol.readFile('/cfg/app.conf'), 'port=8000\n')
  const listed = (await vol.list('/cfg')).map((e) => `${e.name}:${e.type}`).sort()
  assert.deepEqual(listed, ['app.conf:file', 'deep:directory'])
  assert.equal((await vol.getInfo('/cfg')).type, 'directory')
  await assert.rejects(vol.readFile('/nope'), VolumePathNotFoundError)
  assert.equal(await vol.exists('/nope'), false)

  const sbx = await Sandbox.create('host', { volumeMounts: { '/data': name }, timeoutMs: 60_000 })
  made.push(sbx.sandboxId)
  // Files written through the API are box root's, as if box root wrote them.
  const st = await sbx.commands.run('stat -c "%u:%g %a" /data/cfg/app.conf; cat /data/cfg/app.conf', { user: 'root' })
  assert.equal(st.stdout, '0:0 644\nport=8000\n')
  await sbx.commands.run('echo from-box > /data/cfg/box.txt && ln -s /etc/hostname /data/cfg/link', { user: 'root' })
  assert.equal(await vol.readFile('/cfg/box.txt'), 'from-box\n')
  const box = await vol.getInfo('/cfg/box.txt')
  assert.equal(box.uid, 0)
  // A symlink that leaves the volume does not lead the API out of it.
  assert.equal((await vol.getInfo('/cfg/link')).type, 'symlink')
  await assert.rejects(vol.readFile('/cfg/link'))

  await vol.remove('/cfg')
  assert.equal((await sbx.commands.run('ls -A /data', { user: 'root' })).stdout, '')
  await sbx.kill()
  assert.equal(await Volume.destroy(name), true)
})
