/**
 * nginx as the tests run it on a site file from deploy/: in the foreground, with every path it writes
 * in the test's own folder, so it needs no root-owned directory and leaves nothing behind.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { NGINX } from './engines'

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
export function severalInstancesSite(port: number, instances: [number, number]): string {
  return readFileSync(join(import.meta.dir, '..', '..', 'deploy', 'several-instances', 'nginx.conf'), 'utf8')
    .replace('listen 80;', `listen 127.0.0.1:${port};`)
    .replace('server petstore-1:8080;', `server 127.0.0.1:${instances[0]};`)
    .replace('server petstore-2:8080;', `server 127.0.0.1:${instances[1]};`)
}
