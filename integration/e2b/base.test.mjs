// The built-in template "base" (corral e2b setup) as the E2B SDK's default
// template: integration/e2b_test.go builds it and runs this file.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Template } from 'e2b'

const made = []
after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

test('base: the default template has user "user", its home, bash, python3, git and curl', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  assert.equal((await sbx.getInfo()).templateId, 'base')
  const r = await sbx.commands.run('whoami; pwd; echo "$HOME"; getent passwd user | cut -d: -f7')
  assert.equal(r.stdout, 'user\n/home/user\n/home/user\n/bin/bash\n')
  for (const cmd of ['python3 --version', 'pip3 --version', 'git --version', 'curl --version', 'bash --version']) {
    await sbx.commands.run(cmd) // throws CommandExitError when missing
  }
  // The SDK's relative paths are the user's home.
  await sbx.files.write('notes.txt', 'hi')
  assert.equal((await sbx.commands.run('cat /home/user/notes.txt')).stdout, 'hi')
  assert.equal((await sbx.commands.run('stat -c %U /home/user/notes.txt')).stdout, 'user\n')
  // root is there for what needs it, as in E2B: as the SDK's user root, and
  // through passwordless sudo (the template allows privilege escalation).
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  assert.equal((await sbx.commands.run('sudo -n true && sudo -n whoami')).stdout, 'root\n')
  assert.equal((await sbx.commands.run('grep NoNewPrivs /proc/self/status')).stdout, 'NoNewPrivs:\t0\n')
})

test('base: a template built on it (fromBaseImage) keeps sudo, in its build steps and sandboxes', async () => {
  const name = `it-on-base-${Math.random().toString(36).slice(2, 10)}`
  try {
    await Template.build(Template().fromBaseImage().runCmd('sudo -n whoami > step-sudo'), name)
    const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
    made.push(sbx.sandboxId)
    assert.equal((await sbx.commands.run('whoami; cat step-sudo; sudo -n whoami')).stdout, 'user\nroot\nroot\n')
  } finally {
    await fetch(`${process.env.E2B_API_URL}/templates/${name}`, { method: 'DELETE', headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
  }
})
