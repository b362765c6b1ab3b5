/**
 * nginx as the tests run it on a site file from deploy/: in the foreground, with every path it writes
 * in the test's own folder, so it needs no root-owned directory and leaves nothing behind. The caller
 * stops it (SIGTERM, so the master stops its workers on the way out).
 */
import type { Subprocess } from 'bun'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { eventually, tempDir } from './binary'
import { NGINX } from './engines'
import { freePort } from './ports'

/** Writes `site` and a main config around it into `dir`; returns the command that runs nginx on them. */
export function nginxCommand(dir: string, site: string): string[] {
  writeFileSync(join(dir, 'site.conf'), site)
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off; user root; pid ${dir}/nginx.pid; error_log ${dir}/error.log; events {}
     http { access_log off; client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy;
            fastcgi_temp_path ${dir}/f; uwsgi_temp_path ${dir}/u; scgi_temp_path ${dir}/s; include ${dir}/site.conf; }`,
  )
  return [NGINX, '-p', dir, '-c', join(dir, 'nginx.conf')]
}

/** deploy/several-instances/nginx.conf as shipped, with nginx's and the two instances' addresses made local. */
function severalInstancesSite(port: number, instances: [number, number]): string {
  return readFileSync(join(import.meta.dir, '..', '..', 'deploy', 'several-instances', 'nginx.conf'), 'utf8')
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
    .replace(/\bpetstore-1:8080\b/, `127.0.0.1:${instances[0]}`)
    .replace(/\bpetstore-2:8080\b/, `127.0.0.1:${instances[1]}`)
}

/** nginx on the shipped several-instances site in front of two local instances, once it answers. */
export async function nginxInFront(instancePorts: [number, number]): Promise<{ origin: string; proc: Subprocess }> {
  const dir = tempDir()
  const port = await freePort()
  const proc = Bun.spawn(nginxCommand(dir, severalInstancesSite(port, instancePorts)), { cwd: dir, stdout: 'ignore', stderr: 'pipe' })
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
