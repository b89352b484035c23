// Sending one notification: a webhook or a Slack incoming webhook POSTed
// through the forge client (lib/forge/client.ts: the host resolved and refused
// when it is not a public address, unless CONDUCTOR_ALLOW_PRIVATE_FORGES=1, no
// redirect followed, a timeout), or an email through SMTP with nodemailer. A
// NotifyRefusedError is final (no retry changes it); any other error is
// retried by the caller.
import { createHmac } from 'node:crypto';
import type SMTPTransport from 'nodemailer/lib/smtp-transport/index.js';
import {
  callForge,
  ForgeRefusedError,
  ForgeTransportError,
  transportErrorText,
} from '../forge/client.ts';
import { emailMessage, type FinishedJob, slackBody, webhookBody } from './message.ts';

/** The receiver refused the notification for good, or it cannot be sent at all. */
export class NotifyRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotifyRefusedError';
  }
}

/** `sha256=<hex HMAC-SHA256 of body>`, the X-Conductor-Signature-256 header. */
export function signatureHeader(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

export type Destination =
  | { kind: 'webhook'; url: string; secret: string }
  | { kind: 'slack'; url: string }
  | { kind: 'email'; to: string[] };

export interface SendOptions {
  /** The X-Conductor-Delivery id: the same on every attempt of one message. */
  deliveryId: string;
  timeoutMs: number;
  smtp?: { url: string; from: string };
}

/** Sends `job`'s notification to `to`; throws NotifyRefusedError for good, anything else to retry. */
export async function sendNotification(
  to: Destination,
  job: FinishedJob,
  opts: SendOptions,
): Promise<void> {
  if (to.kind === 'email') return sendEmail(to.to, job, opts);
  const body = to.kind === 'webhook' ? webhookBody(job) : slackBody(job);
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'User-Agent': 'conductor-notifications',
    'X-Conductor-Delivery': opts.deliveryId,
  };
  if (to.kind === 'webhook') {
    headers['X-Conductor-Event'] = 'job.finished';
    headers['X-Conductor-Signature-256'] = signatureHeader(to.secret, body);
  }
  const where = new URL(to.url).host;
  try {
    const answer = await callForge({
      method: 'POST',
      url: to.url,
      headers,
      body,
      timeoutMs: opts.timeoutMs,
      maxBytes: 64 * 1024,
    });
    if (answer.kind === 'ok') return;
    if (answer.kind === 'permanent') {
      throw new NotifyRefusedError(`${where} answered HTTP ${answer.status}`);
    }
    throw new Error(`${where} answered HTTP ${answer.status}`);
  } catch (err) {
    // The URL is a secret (a Slack webhook's is its credential): errors name the host only.
    if (err instanceof ForgeRefusedError) {
      throw new NotifyRefusedError(err.message.split(to.url).join(`the URL at ${where}`));
    }
    if (err instanceof ForgeTransportError) {
      throw new Error(`${where}: ${transportErrorText(err, opts.timeoutMs)}`);
    }
    throw err;
  }
}

async function sendEmail(to: string[], job: FinishedJob, opts: SendOptions): Promise<void> {
  if (!opts.smtp) {
    throw new NotifyRefusedError('no SMTP server is configured (CONDUCTOR_SMTP_URL)');
  }
  // nodemailer (236 KB) is loaded by the first email, not at the sweep's
  // cold start (docs/architecture.md, "Bundles").
  const { createTransport } = await import('nodemailer');
  const transport = createTransport({
    url: opts.smtp.url,
    connectionTimeout: opts.timeoutMs,
    greetingTimeout: opts.timeoutMs,
    socketTimeout: opts.timeoutMs,
  } as SMTPTransport.Options);
  const { subject, text } = emailMessage(job);
  try {
    await transport.sendMail({
      from: opts.smtp.from,
      to,
      subject,
      text,
      headers: { 'X-Conductor-Delivery': opts.deliveryId },
    });
  } catch (err) {
    const code = (err as { responseCode?: unknown }).responseCode;
    const message = err instanceof Error ? err.message : String(err);
    // 5xx: the server refused the message for good (a bad address, a policy).
    if (typeof code === 'number' && code >= 500) {
      throw new NotifyRefusedError(`the SMTP server refused the email: ${message}`);
    }
    throw new Error(`sending the email failed: ${message}`);
  } finally {
    transport.close();
  }
}
