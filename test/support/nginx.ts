/**
 * nginx in front of local instances with the shipped upstream (deploy/several-instances/nginx.conf),
 * only the addresses made local: for the tests of several instances behind a proxy. The caller stops
 * it (SIGTERM, so the master stops its workers on the way out).
 */
import type { Subprocess } from 'bun'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { eventually, tempDir } from './binary'
import { NGINX } from './engines'
import { freePort } from './ports'

export async function nginxInFront(instancePorts: [number, number]): Promise<{ origin: string; proc: Subprocess }> {
  const dir = tempDir()
  const port = await freePort()
  const site = readFileSync(join(import.meta.dir, '..', '..', 'deploy', 'several-instances', 'nginx.conf'), 'utf8')
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
    .replace('server petstore-1:8080 ', `server 127.0.0.1:${instancePorts[0]} `)
    .replace('server petstore-2:8080 ', `server 127.0.0.1:${instancePorts[1]} `)
  writeFileSync(join(dir, 'site.conf'), site)
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off; user root; pid ${dir}/nginx.pid; error_log ${dir}/error.log; events {}
     http { access_log off; client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
            fastcgi_temp_path ${dir}/f; uwsgi_temp_path ${dir}/u; scgi_temp_path ${dir}/s; include ${dir}/site.conf; }`,
  )
  const proc = Bun.spawn([NGINX, '-p', dir, '-c', join(dir, 'nginx.conf')], { cwd: dir, stdout: 'ignore', stderr: 'pipe' })
  const origin = `http://127.0.0.1:${port}`
  await eventually(async () => {
    try {
      return (await fetch(`${origin}/healthz`)).status === 200
    } catch {
      return false
    }
  }, 20_000)
  return { origin, proc }
}
