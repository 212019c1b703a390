// Builds templates through the official E2B SDK's Template builder
// (Template.build) against a Corral daemon and creates sandboxes from
// them. integration/e2b_test.go starts the daemon and runs this file; the
// builds start from the daemon's built-in busybox image (no network).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, Template, BuildError } from 'e2b'

const run = Math.random().toString(36).slice(2, 10)
const name = `it-tpl-${run}`
const made = []
const templates = []
const ctx = mkdtempSync(path.join(tmpdir(), 'e2b-tpl-'))

// deleteTemplate removes a template the way the E2B API does (the JS SDK
// has no call for it): DELETE /templates/{id}.
async function deleteTemplate(id) {
  return fetch(`${process.env.E2B_API_URL}/templates/${encodeURIComponent(id)}`, {
    method: 'DELETE',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY },
  })
}

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
  for (const t of templates) await deleteTemplate(t).catch(() => {})
  rmSync(ctx, { recursive: true, force: true })
})

test('Template.build: copy, setEnvs, setWorkdir, runCmd; sandboxes from the template and its tag', async () => {
  mkdirSync(path.join(ctx, 'app'))
  writeFileSync(path.join(ctx, 'app', 'main.sh'), 'echo from app\n')
  writeFileSync(path.join(ctx, 'notes.txt'), 'notes\n')
  const tpl = Template({ fileContextPath: ctx })
    .fromImage('busybox')
    .setEnvs({ GREETING: 'hi from template' })
    .setWorkdir('/srv')
    .copy('app', 'app/')
    .copy('notes.txt', '/opt/notes.txt', { mode: 0o600 })
    .runCmd('echo "$GREETING" > built.txt && id -un > who.txt')
    .runCmd('id -un > /root-who.txt', { user: 'root' })
    // The SDK runs commands with /bin/bash -l -c; busybox's sh takes that.
    .runCmd(`printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 755 /bin/bash`, { user: 'root' })
  templates.push(name)
  let logs = []
  const info = await Template.build(tpl, `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message), cpuCount: 1, memoryMB: 256 })
  assert.equal(info.templateId, name)
  assert.deepEqual(info.tags, ['v1'])
  assert.ok(logs.some((l) => l.includes('run echo "$GREETING" > built.txt')), `build logs ${JSON.stringify(logs)} lack the RUN step`)
  assert.ok(await Template.exists(name))
  assert.equal(await Template.exists(`${name}-nope`), false)

  const sbx = await Sandbox.create(name, { timeoutMs: 60_000 })
  made.push(sbx.sandboxId)
  // E2B's defaults: the user "user"; the last WORKDIR; ENV in every step.
  const r = await sbx.commands.run('pwd; id -un; echo "$GREETING"; cat built.txt who.txt /root-who.txt; sh app/main.sh; cat /opt/notes.txt; stat -c %a /opt/notes.txt').catch((e) => { throw new Error(`exit ${e.exitCode}: ${e.stdout} | ${e.stderr}`) })
  assert.equal(r.stdout, '/srv\nuser\nhi from template\nhi from template\nuser\nroot\nfrom app\nnotes\n600\n')
  const tagged = await Sandbox.create(`${name}:v1`, { timeoutMs: 60_000 })
  made.push(tagged.sandboxId)
  assert.equal((await tagged.commands.run('cat /srv/built.txt')).stdout, 'hi from template\n')

  // The same template again comes from the build cache.
  logs = []
  await Template.build(tpl, name, { onBuildLogs: (e) => logs.push(e.message) })
  assert.ok(logs.filter((l) => l.includes('CACHED')).length >= 5, `rebuild logs ${JSON.stringify(logs)}; want its steps CACHED`)
})

test('Template.build: fromDockerfile (root in / while building, then E2B\'s user)', async () => {
  const t = `${name}-df`
  templates.push(t)
  writeFileSync(path.join(ctx, 'notes.txt'), 'notes\n')
  const dockerfile = `FROM busybox
ENV MODE=docker
WORKDIR /app
COPY notes.txt ./
RUN echo "$MODE" > mode.txt && id -un > builder.txt
RUN echo '#!/bin/sh' > /bin/bash && echo 'exec /bin/sh "$@"' >> /bin/bash && chmod 755 /bin/bash
`
  await Template.build(Template({ fileContextPath: ctx }).fromDockerfile(dockerfile), t)
  const sbx = await Sandbox.create(t, { timeoutMs: 60_000 })
  made.push(sbx.sandboxId)
  const r = await sbx.commands.run('pwd; id -un; cat mode.txt builder.txt notes.txt')
  assert.equal(r.stdout, '/app\nuser\ndocker\nroot\nnotes\n')
})

test('Template.build: a failing step, and what Corral does not build, throw BuildError', async () => {
  templates.push(`${name}-bad`)
  await assert.rejects(
    Template.build(Template().fromImage('busybox').runCmd('echo broken >&2; exit 3'), `${name}-bad`),
    (e) => e instanceof BuildError && /exit code 3/.test(e.message),
  )
  await assert.rejects(Sandbox.create(`${name}-bad`, { timeoutMs: 10_000 }))
})

test('Template.setStartCmd: a sandbox answers on its port as soon as create returns', async () => {
  const t = `${name}-start`
  templates.push(t)
  const tpl = Template()
    .fromImage('busybox')
    .setWorkdir('/home/user/www')
    .runCmd('echo served > index.html')
    .runCmd(`printf '#!/bin/sh\\nexec /bin/sh "$@"\\n' > /bin/bash && chmod 755 /bin/bash`, { user: 'root' })
    .setStartCmd('httpd -f -p 8000', 'wget -q -O /dev/null http://127.0.0.1:8000/index.html')
  await Template.build(tpl, t)
  const sbx = await Sandbox.create(t, { timeoutMs: 60_000 })
  made.push(sbx.sandboxId)
  // No retry: the ready command passed before create returned.
  const r = await sbx.commands.run('wget -q -O - http://127.0.0.1:8000/index.html')
  assert.equal(r.stdout, 'served\n')
  const procs = await sbx.commands.list()
  const start = procs.find((p) => p.tag === 'start')
  assert.ok(start, `processes ${JSON.stringify(procs)} lack the start command (tag start)`)
  // The start command runs as the template's user in its workdir.
  const who = await sbx.commands.run(`stat -c %U /proc/${start.pid}; readlink /proc/${start.pid}/cwd`)
  assert.equal(who.stdout, 'user\n/home/user/www\n')
})

test('Template.assignTags and removeTags name and unname a build', async () => {
  const t = `${name}-tags`
  templates.push(t)
  await Template.build(Template().fromImage('busybox').runCmd('echo one > v.txt'), `${t}:v1`)
  const given = await Template.assignTags(`${t}:v1`, ['prod', 'stable'])
  assert.deepEqual(given.tags, ['prod', 'stable'])
  assert.ok(given.buildId)
  assert.ok(await Template.exists(`${t}:prod`))
  await Template.removeTags(t, 'prod')
  assert.equal(await Template.exists(`${t}:prod`), false)
  assert.ok(await Template.exists(`${t}:stable`))
  await assert.rejects(Template.removeTags(t, 'prod'), /no tag prod/)
  await assert.rejects(Template.assignTags(`${name}-nope:v1`, 'x'))
})

test('DELETE /templates/{id} removes a built template', async () => {
  const t = `${name}-gone`
  templates.push(t)
  await Template.build(Template().fromImage('busybox').runCmd('true'), t)
  assert.ok(await Template.exists(t))
  assert.equal((await deleteTemplate(t)).status, 204)
  assert.equal(await Template.exists(t), false)
})
