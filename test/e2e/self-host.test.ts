// Self-hosted on one server (issue #49): the package installed into a
// temporary prefix (npm pack, npm install -g --prefix), its `conductor
// server` on the run's PostgreSQL, bound to 127.0.0.2,
// behind a real nginx that terminates TLS with a certificate this test makes.
// Through the proxy: a signed push makes a job, a real runner that trusts
// the CA runs it over TLS, the commit status links to the public https URL,
// the session cookie is Secure, the request log names the client; a
// forwarded header from a peer that is not a trusted proxy counts for
// nothing; a migration changed after it was applied stops the server,
// naming the file, until `conductor migrate repair` records it.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { appendFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { createDatabase, dropDatabase, withDatabase } from '../../local/postgres.ts';
import { githubPush } from '../forge/fixtures/github.ts';
import { adminUrl } from '../helpers/db.ts';
import { startFakeForge } from '../helpers/fake-forge.ts';
import { installPackage } from '../helpers/package-install.ts';
import { runCommand, runScript, type ServerProcess } from '../helpers/server-process.ts';
import { gitRepo, tempDir, waitFor } from '../runner/support.ts';
import { sendWebhook } from './calls.ts';
import { pipeline } from './payloads.ts';

// The run's database server: the system PostgreSQL (15) in CI's second mode
// (DATABASE_URL), the embedded one otherwise; CONDUCTOR_SELF_HOST_PG_URL
// names another. The server under test gets a database of its own on it,
// named under the run's prefix (CI drops everything under it).
const SERVER_PG = process.env.CONDUCTOR_SELF_HOST_PG_URL ?? adminUrl();
const NGINX = '/usr/sbin/nginx';
assert.ok(existsSync(NGINX), `${NGINX} is missing: apt-get install nginx (.ci/run does)`);

const dir = await tempDir('conductor-self-host-');
const dbName = `${process.env.CONDUCTOR_TEST_DB_PREFIX ?? 't_'}selfhost_${randomBytes(4).toString('hex')}`;
await createDatabase(SERVER_PG, dbName);
after(() => dropDatabase(SERVER_PG, dbName));
const databaseUrl = withDatabase(SERVER_PG, dbName);

/** A port the OS says is free now (nginx takes it next). */
async function freePort(host: string): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, host, done));
  const { port } = server.address() as { port: number };
  await new Promise((done) => server.close(done));
  return port;
}

// A CA and a certificate for 127.0.0.1 it signed, as an operator's own CA would.
const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
openssl(
  'req',
  '-x509',
  '-newkey',
  'rsa:2048',
  '-nodes',
  '-days',
  '2',
  '-subj',
  '/CN=Conductor test CA',
  '-keyout',
  'ca.key',
  '-out',
  'ca.pem',
);
openssl(
  'req',
  '-newkey',
  'rsa:2048',
  '-nodes',
  '-subj',
  '/CN=127.0.0.1',
  '-keyout',
  'server.key',
  '-out',
  'server.csr',
);
await writeFile(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
openssl(
  'x509',
  '-req',
  '-in',
  'server.csr',
  '-CA',
  'ca.pem',
  '-CAkey',
  'ca.key',
  '-CAcreateserial',
  '-days',
  '2',
  '-extfile',
  'san.ext',
  '-out',
  'server.pem',
);
const ca = await readFile(join(dir, 'ca.pem'));

const proxyPort = await freePort('127.0.0.1');
const publicUrl = `https://127.0.0.1:${proxyPort}`;
const adminToken = `ca_${randomBytes(16).toString('hex')}`;
const fake = await startFakeForge({ statuses: true });
const pkg = await installPackage();
const conductor = join(pkg.bin, 'conductor');
const serverEnv = {
  DATABASE_URL: databaseUrl,
  CONDUCTOR_PUBLIC_URL: publicUrl,
  CONDUCTOR_TRUSTED_PROXIES: '127.0.0.1',
  CONDUCTOR_DATA_DIR: join(dir, 'data'),
  CONDUCTOR_ADMIN_TOKEN: adminToken,
  CONDUCTOR_GITHUB_API_URL: fake.url,
  CONDUCTOR_ALLOW_PRIVATE_FORGES: '1',
};

/** The installed `conductor` as its systemd unit runs it (docs/self-host.md), from another directory. */
function installed(args: string[], env: Record<string, string>): ServerProcess {
  return runCommand(conductor, args, env, pkg.elsewhere);
}
function startServer(port = 0): ServerProcess {
  return installed(['server', '--host', '127.0.0.2', '--port', String(port)], serverEnv);
}

let server = startServer();
const serverPort = Number((await server.waitFor(/listening: +127\.0\.0\.2 port (\d+)/))[1]);

// nginx as docs/self-host.md configures it, on loopback, in the test's own directory.
async function startNginx(upstreamPort: number) {
  for (const d of ['logs', 'tmp']) await mkdir(join(dir, 'nginx', d), { recursive: true });
  const conf = `worker_processes 1;
daemon off;
user root;
pid ${dir}/nginx/nginx.pid;
error_log ${dir}/nginx/logs/error.log warn;
events { worker_connections 128; }
http {
  access_log ${dir}/nginx/logs/access.log;
  client_body_temp_path ${dir}/nginx/tmp/body;
  proxy_temp_path ${dir}/nginx/tmp/proxy;
  fastcgi_temp_path ${dir}/nginx/tmp/fastcgi;
  uwsgi_temp_path ${dir}/nginx/tmp/uwsgi;
  scgi_temp_path ${dir}/nginx/tmp/scgi;
  upstream conductor { server 127.0.0.2:${upstreamPort}; keepalive 8; }
  server {
    listen 127.0.0.1:${proxyPort} ssl;
    server_name 127.0.0.1;
    ssl_certificate ${dir}/server.pem;
    ssl_certificate_key ${dir}/server.key;
    client_max_body_size 64m;
    location / {
      proxy_pass http://conductor;
      proxy_bind 127.0.0.1;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Forwarded-Host $http_host;
      proxy_request_buffering off;
      proxy_buffering off;
      proxy_read_timeout 60s;
    }
  }
}
`;
  await writeFile(join(dir, 'nginx', 'nginx.conf'), conf);
  const child = spawn(NGINX, ['-p', join(dir, 'nginx'), '-c', join(dir, 'nginx', 'nginx.conf')], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  const gone = new Promise((done) => child.once('exit', done));
  after(async () => {
    child.kill('SIGQUIT');
    await gone;
  });
  await waitFor(`nginx on ${proxyPort} (${err})`, () =>
    call('GET', '/v1/health').then((r) => (r.status === 200 ? true : undefined)),
  );
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: tests read whatever JSON the route answers
  body: any;
}

/**
 * A request through the proxy over TLS (trusting only the test's CA), from
 * 127.0.0.4, so the client's address is not the proxy's; or, with `direct`,
 * to the server itself from 127.0.0.3, a peer it does not trust.
 */
function call(
  method: string,
  path: string,
  opts: {
    token?: string;
    body?: unknown;
    raw?: string | Buffer;
    headers?: Record<string, string>;
    direct?: boolean;
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Buffer | undefined = opts.raw;
  if (body === undefined && opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
  return new Promise((done, fail) => {
    const common = { method, path, headers, agent: false as const };
    const req = opts.direct
      ? httpRequest({ ...common, host: '127.0.0.2', port: serverPort, localAddress: '127.0.0.3' })
      : httpsRequest({
          ...common,
          host: '127.0.0.1',
          port: proxyPort,
          ca,
          localAddress: '127.0.0.4',
        });
    req.on('error', fail);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: unknown = null;
        try {
          parsed = text ? JSON.parse(text) : null;
        } catch {}
        done({ status: res.statusCode ?? 0, headers: res.headers, text, body: parsed });
      });
    });
    req.end(body);
  });
}
// What test/e2e/calls.ts helpers need of a stack, through the proxy.
const viaProxy = {
  adminToken,
  call: (m: string, p: string, o: Parameters<typeof call>[2]) => call(m, p, o),
} as unknown as Parameters<typeof sendWebhook>[0];

await startNginx(serverPort);

test('through nginx over TLS: a signed push makes a job, a runner that trusts the CA runs it, the status links to the public URL, the cookie is Secure, the log names the client', async () => {
  const yml = pipeline('selfhost', '  build:\n    script: [echo built over tls]\n');
  const { dir: repo, sha } = await gitRepo({ '.conductor.yml': yml });
  // The forge: its API (the pipeline file, statuses) and its git over HTTP
  // (git http-backend, as a forge serves it; a commit status needs an http(s) repository).
  fake.setFile('acme/selfhost', sha, yml);
  execFileSync('git', ['clone', '-q', '--bare', repo, join(dir, 'selfhost.git')]);
  const gitHost = createHttpServer((req, res) => {
    const [path = '/', query = ''] = (req.url ?? '/').split('?');
    const cgi = spawn('git', ['http-backend'], {
      env: {
        PATH: process.env.PATH ?? '',
        GIT_PROJECT_ROOT: dir,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: path,
        QUERY_STRING: query,
        REQUEST_METHOD: req.method ?? 'GET',
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        ...(req.headers['git-protocol']
          ? { GIT_PROTOCOL: String(req.headers['git-protocol']) }
          : {}),
      },
    });
    req.pipe(cgi.stdin);
    const chunks: Buffer[] = [];
    cgi.stdout.on('data', (c) => chunks.push(c));
    cgi.on('close', () => {
      const out = Buffer.concat(chunks);
      const split = out.indexOf('\r\n\r\n');
      const head = out.subarray(0, split).toString().split('\r\n');
      for (const line of head) {
        const [name = '', ...value] = line.split(': ');
        if (name.toLowerCase() === 'status') res.statusCode = Number.parseInt(value.join(': '), 10);
        else res.setHeader(name, value.join(': '));
      }
      res.end(out.subarray(split + 4));
    });
  });
  await new Promise<void>((done) => gitHost.listen(0, '127.0.0.1', done));
  after(() => new Promise((done) => gitHost.close(done)));
  const repoUrl = `http://127.0.0.1:${(gitHost.address() as { port: number }).port}/selfhost.git`;
  const made = await call('POST', '/v1/projects', {
    token: adminToken,
    body: {
      id: 'selfhost',
      name: 'selfhost',
      forge: 'github',
      repo: 'acme/selfhost',
      repo_url: repoUrl,
      forge_token: 'ghp_selfhosttoken',
    },
  });
  assert.equal(made.status, 201, made.text);
  const worker = await call('POST', '/v1/workers', {
    token: adminToken,
    body: { name: 'selfhost', labels: ['selfhost'], projects: ['selfhost'] },
  });
  assert.equal(worker.status, 201, worker.text);

  const hook = await sendWebhook(viaProxy, 'github', 'push', githubPush('acme/selfhost', sha), {
    secret: made.body.webhook_secret,
  });
  assert.equal(hook.status, 202, hook.text);
  const jobId: string = hook.body.job_id;

  const tokenFile = join(dir, 'runner-token');
  await writeFile(tokenFile, `${worker.body.token}\n`, { mode: 0o600 });
  const runner = runScript(
    'scripts/runner.ts',
    [
      '--url',
      publicUrl,
      '--token-file',
      tokenFile,
      '--once',
      '--same-user',
      '--workdir',
      join(dir, 'work'),
    ],
    { NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') },
  );
  assert.equal(await runner.exited, 0, runner.output());
  let last: unknown;
  const job = await waitFor(`the job to finish (${runner.output()})`, async () => {
    const r = await call('GET', `/v1/jobs/${jobId}`, { token: adminToken });
    last = r.body;
    return ['success', 'failed'].includes(r.body?.job?.state) ? r.body : undefined;
  }).catch((err) => {
    throw new Error(`${err.message}\n${JSON.stringify(last)}`);
  });
  assert.equal(job.job.state, 'success', `${JSON.stringify(job)}\n${runner.output()}`);
  assert.equal(job.tasks[0].name, 'build');
  const log = await call('GET', `/v1/tasks/${job.tasks[0].id}/log`, { token: adminToken });
  assert.match(log.text, /built over tls/);

  // The commit status's link is the public https URL, whatever the server's own address.
  const statuses = await fake.waitForStatuses(sha, 2);
  const link = statuses.at(-1)!.body.target_url as string;
  assert.ok(link.startsWith(`${publicUrl}/jobs/${jobId}?sig=`), link);
  const page = await call('GET', new URL(link).pathname + new URL(link).search);
  assert.equal(page.status, 200);

  // Signing in through the proxy: the server itself speaks plain http, the cookie is Secure.
  const login = await call('POST', '/login', {
    raw: `token=${adminToken}&next=%2F`,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });
  assert.equal(login.status, 303, login.text);
  const cookie = String(login.headers['set-cookie']);
  assert.match(cookie, /conductor_session=[^;]+;.*; Secure/);

  // The request log names the client (127.0.0.4), not the proxy (127.0.0.1).
  const line = await waitFor('the request line', () =>
    server.logLines().find((l) => l.message === 'request' && l.path === '/login'),
  );
  assert.equal(line.client, '127.0.0.4', JSON.stringify(line));
  assert.equal(line.status, 303);

  const ready = await call('GET', '/v1/ready');
  assert.deepEqual([ready.status, ready.body], [200, { ready: true }]);
});

test('forwarded headers from a peer that is not a trusted proxy count for nothing', async () => {
  const forged = {
    'x-forwarded-for': '203.0.113.9',
    'x-forwarded-proto': 'http',
    'x-forwarded-host': 'evil.example',
  };
  const healthLines = () =>
    server.logLines().filter((l) => l.message === 'request' && l.path === '/v1/health');
  const seen = healthLines().length;
  const health = await call('GET', '/v1/health', { direct: true, headers: forged });
  assert.equal(health.status, 200);
  // The line is written as the answer goes out: wait for it.
  const line = await waitFor('the request line', () => healthLines()[seen]);
  assert.equal(line.client, '127.0.0.3', JSON.stringify(line));
  // Through the proxy, the same forged hop is the client's own claim, left of
  // the address nginx saw: the client is still the address nginx saw.
  await call('GET', '/v1/health', { headers: forged });
  const proxied = await waitFor('the request line', () => healthLines()[seen + 1]);
  assert.equal(proxied.client, '127.0.0.4', JSON.stringify(proxied));
});

test('a migration changed after it was applied stops the server, naming the file; after the repair it starts', async () => {
  assert.equal(await server.stop(), 0, server.output());
  assert.match(server.output(), /SIGTERM: stopping[\s\S]*stopped/);
  await appendFile(
    join(pkg.installed, 'migrations', '019_check_domains.sql'),
    '\n-- tidied after release\n',
  );
  const refused = startServer();
  assert.equal(await refused.exited, 1);
  assert.match(
    refused.output(),
    /migration 019_check_domains\.sql was changed after it was applied/,
  );
  const ready = await call('GET', '/v1/ready');
  assert.equal(ready.status, 502, 'nothing serves behind the proxy');

  const repair = installed(['migrate', 'repair'], { DATABASE_URL: databaseUrl });
  assert.equal(await repair.exited, 0, repair.output());
  assert.match(repair.output(), /recorded 019_check_domains\.sql as it is now/);

  // The proxy's upstream names the old port; the server comes back on it.
  server = startServer(serverPort);
  await server.waitFor(/listening: +127\.0\.0\.2 port/);
  const again = await call('GET', '/v1/ready');
  assert.deepEqual([again.status, again.body], [200, { ready: true }]);
  assert.equal(await server.stop(), 0);
});
