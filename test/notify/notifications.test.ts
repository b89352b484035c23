// Notifications (issue #54) against receivers on loopback: a webhook whose
// body is signed, a Slack incoming webhook, and email through an SMTP server
// from npm (smtp-server). A finished job writes its outbox rows in its own
// transaction; the sweep sends them with retries, each attempt under the same
// X-Conductor-Delivery id.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { SMTPServer } from 'smtp-server';
import { runCtl } from '../../cli/ctl.ts';
import { deliverNotifications, notifyOptions } from '../../lib/app/notify.ts';
import { runSweep } from '../../lib/app/sweep.ts';
import { allowPrivateForges } from '../../lib/forge/client.ts';
import { sha } from '../e2e/payloads.ts';
import {
  ONE_TASK,
  pipelineFile,
  projectOn,
  pushSettled,
  runTasks,
  type StatusProject,
  statusStack,
} from '../statuses/support.ts';

interface Received {
  headers: IncomingMessage['headers'];
  body: string;
}

/** An HTTP receiver on loopback that answers each request as `plan` says (then 200). */
async function receiver() {
  const got: Received[] = [];
  const plan: Array<'hang' | number> = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c) => {
      body += c;
    });
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      const step = plan.shift() ?? 200;
      // A receiver that takes longer than the sender waits: the message
      // arrived, its answer did not.
      if (step === 'hang') setTimeout(() => res.end('late'), 1500).unref();
      else res.writeHead(step).end(step === 200 ? 'ok' : 'boom');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  after(() => server.close());
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, got, plan };
}

interface Mail {
  from: string;
  to: string[];
  data: string;
}

/** An SMTP server on loopback (smtp-server) whose next `refuse` messages are refused with 451. */
async function smtpReceiver() {
  const mails: Mail[] = [];
  const state = { refuse: 0 };
  const server = new SMTPServer({
    disabledCommands: ['AUTH', 'STARTTLS'],
    logger: false,
    onData(stream, session, callback) {
      let data = '';
      stream.on('data', (c: Buffer) => {
        data += c.toString('utf8');
      });
      stream.on('end', () => {
        if (state.refuse > 0) {
          state.refuse--;
          const err = Object.assign(new Error('try again later'), { responseCode: 451 });
          callback(err);
          return;
        }
        mails.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          data,
        });
        callback();
      });
    },
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  after(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.server.address() as AddressInfo).port;
  return { url: `smtp://127.0.0.1:${port}`, mails, state };
}

const smtp = await smtpReceiver();
const { fake, stack } = await statusStack(import.meta.filename, {
  CONDUCTOR_SMTP_URL: smtp.url,
  CONDUCTOR_SMTP_FROM: 'ci@conductor.test',
  CONDUCTOR_PUBLIC_URL: 'https://ci.example.test',
});
const admin = stack.adminToken;
const pool = stack.context.pool;

/** A push of a new commit to `ref` whose one task ends `outcome`; answers the job id. */
async function build(p: StatusProject, seed: string, outcome: 'success' | 'failed', ref?: string) {
  const commit = sha(seed);
  fake.setFile(p.repo, commit, pipelineFile(p.label, ONE_TASK));
  const { jobId } = await pushSettled(stack, fake, p, commit, ref);
  await runTasks(stack, p, { check: outcome });
  return jobId;
}

async function rows(jobId: string) {
  const { rows } = await pool.query<{
    reason: string;
    result: string | null;
    attempts: number;
    last_error: string | null;
    wait_s: number;
  }>(
    `select reason, result, attempts, last_error,
            round(extract(epoch from next_attempt_at - now()))::int as wait_s
       from notification_outbox where job_id = $1 order by id`,
    [jobId],
  );
  return rows;
}

/** As if every backoff had passed. */
async function makeAllDue() {
  await pool.query(
    `update notification_outbox set next_attempt_at = now() - interval '1 second' where result is null`,
  );
}

test('the API creates, lists and deletes notifications: the URL is never shown, a webhook secret once, bad fields are 400s naming them, changes are audited', async () => {
  const { p } = await projectOn(stack, fake, 'github', 'notify-api', ONE_TASK);
  const path = `/v1/projects/${p.id}/notifications`;
  const created = await stack.call('POST', path, {
    token: admin,
    body: {
      kind: 'slack',
      url: 'https://hooks.slack.example/services/T0/B0/XYZsecret',
      on: ['failed'],
    },
  });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.notification.kind, 'slack');
  assert.equal(created.body.notification.url_host, 'https://hooks.slack.example');
  assert.ok(!created.text.includes('XYZsecret'), created.text);
  assert.equal(created.body.secret, undefined);

  const hook = await stack.call('POST', path, {
    token: admin,
    body: {
      kind: 'webhook',
      url: 'https://receiver.example/hook',
      on: ['always'],
      branches: ['main', 'release/*'],
    },
  });
  assert.equal(hook.status, 201, hook.text);
  assert.match(hook.body.secret, /^[0-9a-f]{48}$/);
  assert.deepEqual(hook.body.notification.branches, ['main', 'release/*']);

  const listed = await stack.call('GET', path, { token: admin });
  assert.equal(listed.status, 200);
  assert.deepEqual(
    listed.body.notifications.map((n: { kind: string }) => n.kind),
    ['slack', 'webhook'],
  );
  assert.ok(!listed.text.includes('XYZsecret') && !listed.text.includes(hook.body.secret));

  const bad = async (body: unknown, field: RegExp) => {
    const res = await stack.call('POST', path, { token: admin, body });
    assert.equal(res.status, 400, res.text);
    assert.match(res.body.error.message, field);
  };
  await bad({ kind: 'webhook', on: ['failed'] }, /url: required for webhook/);
  await bad({ kind: 'email', on: ['failed'] }, /to: required for email/);
  await bad({ kind: 'email', to: ['not an address'], on: ['failed'] }, /to\.0/);
  await bad({ kind: 'slack', url: 'ftp://x.example/', on: ['failed'] }, /url/);
  await bad({ kind: 'slack', url: 'https://x.example/', on: ['sometimes'] }, /on\.0/);
  await bad({ kind: 'slack', url: 'https://x.example/', on: [] }, /on/);
  await bad(
    { kind: 'slack', url: 'https://x.example/', on: ['failed'], branches: ['+(a|b)'] },
    /branches\.0/,
  );
  await bad({ kind: 'slack', url: 'https://x.example/', on: ['failed'], extra: 1 }, /extra/);

  // As forge_url: a private address is refused unless CONDUCTOR_ALLOW_PRIVATE_FORGES=1.
  allowPrivateForges(false);
  try {
    await bad(
      { kind: 'webhook', url: 'http://169.254.169.254/latest', on: ['failed'] },
      /url: .*not a public address/,
    );
  } finally {
    allowPrivateForges(true);
  }

  assert.equal((await stack.call('GET', path)).status, 401);
  const id = created.body.notification.id;
  assert.equal((await stack.call('DELETE', `${path}/${id}`, { token: admin })).status, 204);
  assert.equal((await stack.call('DELETE', `${path}/${id}`, { token: admin })).status, 404);
  assert.equal((await stack.call('GET', path, { token: admin })).body.notifications.length, 1);
  assert.equal(
    (await stack.call('GET', '/v1/projects/nope/notifications', { token: admin })).status,
    404,
  );

  const audit = await stack.call('GET', `/v1/projects/${p.id}/audit`, { token: admin });
  const notes = audit.body.events
    .filter((e: { action: string }) => e.action === 'notification')
    .map((e: { detail: string }) => e.detail);
  assert.equal(notes.length, 3);
  assert.ok(notes.some((d: string) => d.startsWith('slack') && d.endsWith('deleted')));
  assert.ok(!audit.text.includes('XYZsecret'));
});

test('a failed job reaches a webhook through a timeout and a 500, signed, under one delivery id, and is sent once; the next green build is "fixed"', async () => {
  const { p } = await projectOn(stack, fake, 'github', 'notify-hook', ONE_TASK);
  const r = await receiver();
  const made = await stack.call('POST', `/v1/projects/${p.id}/notifications`, {
    token: admin,
    body: { kind: 'webhook', url: `${r.url}/hook`, on: ['failed', 'fixed'] },
  });
  assert.equal(made.status, 201, made.text);
  const secret: string = made.body.secret;

  const green = await build(p, 'notify-hook-0', 'success');
  assert.deepEqual(await rows(green), [], 'a success after nothing is not "fixed"');

  const red = await build(p, 'notify-hook-1', 'failed');
  assert.deepEqual(
    (await rows(red)).map((x) => [x.reason, x.result]),
    [['failed', null]],
    'the row was written with the job, not sent by the completion',
  );
  assert.equal(r.got.length, 0);

  r.plan.push('hang', 500);
  const opts = { ...notifyOptions(stack.context), timeoutMs: 400 };
  const first = await deliverNotifications(pool, stack.context.keyring, opts);
  assert.equal(first.notifications_failed, 1);
  let [row] = await rows(red);
  assert.equal(row!.attempts, 1);
  assert.match(row!.last_error ?? '', /no answer within 400 ms/);
  assert.ok(row!.wait_s >= 4 && row!.wait_s <= 5, `backoff of 5 s, not ${row!.wait_s}`);
  // Not due yet: nothing is sent.
  assert.equal(
    (await deliverNotifications(pool, stack.context.keyring, opts)).notifications_failed,
    0,
  );

  await makeAllDue();
  assert.equal(
    (await deliverNotifications(pool, stack.context.keyring, opts)).notifications_failed,
    1,
  );
  [row] = await rows(red);
  assert.match(row!.last_error ?? '', /HTTP 500/);
  assert.ok(row!.wait_s >= 9 && row!.wait_s <= 10, `backoff of 10 s, not ${row!.wait_s}`);

  await makeAllDue();
  const sweep = await runSweep(stack.context);
  assert.equal(sweep.notifications_delivered, 1);
  [row] = await rows(red);
  assert.equal(row!.result, 'delivered');
  await makeAllDue();
  await runSweep(stack.context);
  assert.equal(r.got.length, 3, 'three attempts, then no more');

  const ids = new Set(r.got.map((g) => g.headers['x-conductor-delivery']));
  assert.equal(ids.size, 1, 'every attempt carries the same delivery id');
  assert.match([...ids][0] as string, /^[0-9a-f-]{36}$/);
  for (const g of r.got) {
    const want = `sha256=${createHmac('sha256', secret).update(g.body).digest('hex')}`;
    assert.equal(g.headers['x-conductor-signature-256'], want);
    assert.equal(g.headers['content-type'], 'application/json');
  }
  const body = JSON.parse(r.got[2]!.body);
  const job = (await stack.call('GET', `/v1/jobs/${red}`, { token: admin })).body.job;
  assert.equal(body.event, 'job.finished');
  assert.equal(body.project, p.id);
  assert.equal(body.job.id, red);
  assert.equal(body.job.number, job.number);
  assert.equal(body.job.ref, 'refs/heads/main');
  assert.equal(body.job.sha, sha('notify-hook-1'));
  assert.equal(body.job.state, 'failed');
  assert.match(body.job.url, new RegExp(`^https://ci\\.example\\.test/jobs/${red}\\?sig=`));
  assert.deepEqual(body.failed_tasks, ['check']);
  assert.equal('tests' in body, false, 'no test totals without test reports');

  const fixed = await build(p, 'notify-hook-2', 'success');
  const totals = { passed: 3, failed: 0, errored: 0, skipped: 1, time_s: 0.5 };
  await deliverNotifications(pool, stack.context.keyring, {
    ...opts,
    testTotals: async (jobId) => (jobId === fixed ? totals : null),
  });
  assert.deepEqual(
    (await rows(fixed)).map((x) => [x.reason, x.result]),
    [['fixed', 'delivered']],
  );
  const fixedBody = JSON.parse(r.got[3]!.body);
  assert.equal(fixedBody.job.state, 'success');
  assert.deepEqual(fixedBody.failed_tasks, []);
  assert.deepEqual(fixedBody.tests, totals);
  assert.notEqual(
    r.got[3]!.headers['x-conductor-delivery'],
    r.got[0]!.headers['x-conductor-delivery'],
  );

  const again = await build(p, 'notify-hook-3', 'success');
  assert.deepEqual(await rows(again), [], 'a success after a success is not "fixed"');
});

test('Slack hears of jobs on the branches it names only, as blocks linking to the job; a 404 from Slack is given up', async () => {
  const { p } = await projectOn(stack, fake, 'github', 'notify-slack', ONE_TASK);
  const r = await receiver();
  const made = await stack.call('POST', `/v1/projects/${p.id}/notifications`, {
    token: admin,
    body: {
      kind: 'slack',
      url: `${r.url}/services/T/B/x`,
      on: ['always'],
      branches: ['release/*'],
    },
  });
  assert.equal(made.status, 201, made.text);

  const onMain = await build(p, 'notify-slack-1', 'failed');
  const onRelease = await build(p, 'notify-slack-2', 'success', 'refs/heads/release/2.0');
  await runSweep(stack.context);
  assert.deepEqual(
    (await rows(onMain)).map((x) => x.result),
    ['skipped'],
  );
  assert.deepEqual(
    (await rows(onRelease)).map((x) => x.result),
    ['delivered'],
  );
  assert.equal(r.got.length, 1);
  const msg = JSON.parse(r.got[0]!.body);
  assert.match(msg.text, /^notify-slack #\d+ success on release\/2\.0 \([0-9a-f]{7}\)$/);
  assert.equal(msg.blocks[0].type, 'section');
  assert.match(
    msg.blocks[0].text.text,
    new RegExp(`<https://ci\\.example\\.test/jobs/${onRelease}\\?sig=[^|]+\\|`),
  );

  r.plan.push(404);
  const gone = await build(p, 'notify-slack-3', 'failed', 'refs/heads/release/2.1');
  await runSweep(stack.context);
  const [row] = await rows(gone);
  assert.equal(row!.result, 'gave_up');
  assert.match(row!.last_error ?? '', /HTTP 404/);
  assert.ok(!(row!.last_error ?? '').includes('/services/'), 'the URL is not in the error');
});

test('email goes through SMTP, retried after a 451, with the failed tasks and the link', async () => {
  const { p } = await projectOn(stack, fake, 'github', 'notify-mail', ONE_TASK);
  const made = await stack.call('POST', `/v1/projects/${p.id}/notifications`, {
    token: admin,
    body: { kind: 'email', to: ['dev@team.example', 'lead@team.example'], on: ['failed'] },
  });
  assert.equal(made.status, 201, made.text);
  assert.deepEqual(made.body.notification.to, ['dev@team.example', 'lead@team.example']);

  smtp.state.refuse = 1;
  const red = await build(p, 'notify-mail-1', 'failed');
  await runSweep(stack.context);
  let [row] = await rows(red);
  assert.equal(row!.result, null);
  assert.match(row!.last_error ?? '', /451/);
  assert.equal(smtp.mails.length, 0);

  await makeAllDue();
  await runSweep(stack.context);
  [row] = await rows(red);
  assert.equal(row!.result, 'delivered');
  assert.equal(smtp.mails.length, 1);
  const mail = smtp.mails[0]!;
  assert.equal(mail.from, 'ci@conductor.test');
  assert.deepEqual(mail.to, ['dev@team.example', 'lead@team.example']);
  assert.match(mail.data, /^Subject: notify-mail #\d+ failed on main \([0-9a-f]{7}\)/m);
  assert.match(mail.data, /^X-Conductor-Delivery: [0-9a-f-]{36}/m);
  assert.match(mail.data, /Failed tasks: check/);
  assert.match(mail.data, new RegExp(`https://ci\\.example\\.test/jobs/${red}`));
});

test('conductor notification create|list|delete: the URL from a file, the secret shown once, --json the API answer', async () => {
  const { p } = await projectOn(stack, fake, 'github', 'notify-cli', ONE_TASK);
  const dir = await mkdtemp(join(tmpdir(), 'conductor-notify-cli-'));
  after(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'hook-url'), 'https://receiver.example/hooks/abc123\n');
  const ctl = async (...argv: string[]) => {
    const lines: string[] = [];
    const code = await runCtl([...argv, '--url', stack.url, '--token', admin], {
      out: (l) => lines.push(l),
      env: {},
      cwd: dir,
    });
    return { code, out: lines.join('\n') };
  };
  const made = await ctl(
    'notification',
    'create',
    '--project',
    p.id,
    '--kind',
    'webhook',
    '--url-file',
    'hook-url',
    '--on',
    'failed,fixed',
    '--branches',
    'main,release/*',
  );
  assert.equal(made.code, 0, made.out);
  assert.match(made.out, /webhook signing secret \(shown once\): [0-9a-f]{48}/);
  assert.match(made.out, /https:\/\/receiver\.example +failed,fixed +main,release\/\*/);
  assert.ok(!made.out.includes('abc123'));

  const listed = await ctl('notification', 'list', '--project', p.id, '--json');
  assert.equal(listed.code, 0, listed.out);
  const [n] = JSON.parse(listed.out).notifications;
  assert.deepEqual(n.on, ['failed', 'fixed']);

  const wrong = await ctl(
    'notification',
    'create',
    '--project',
    p.id,
    '--kind',
    'slack',
    '--on',
    'failed',
  );
  assert.equal(wrong.code, 1);
  assert.match(wrong.out, /url: required for slack/);

  const gone = await ctl('notification', 'delete', '--project', p.id, n.id);
  assert.equal(gone.code, 0, gone.out);
  assert.equal((await ctl('notifications', '--project', p.id, '--json')).out.includes(n.id), false);
});
