// AWS Signature Version 4, for the two requests Conductor signs itself: RDS
// IAM tokens (a presigned `connect`, lib/db/iam-token.ts) and the idle gate's
// S3 object (lib/idle/s3.ts). The SDK's clients would weigh about 400 KB in
// every bundle for three S3 calls; test/db/iam-token.test.ts and
// test/idle/s3.test.ts check both against the SDK's own signer.
import { createHash, createHmac } from 'node:crypto';

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

// RFC 3986 unreserved characters stay, everything else is %XX (SigV4's rule).
export const uriEncode = (s: string) =>
  encodeURIComponent(s).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
export const sha256Hex = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');
const hmac = (key: Buffer | string, s: string) =>
  createHmac('sha256', key).update(s, 'utf8').digest();

/** `20260304T050607Z` and `20260304` for a date. */
export function amzDate(date: Date): { iso: string; day: string } {
  const iso = date
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
  return { iso, day: iso.slice(0, 8) };
}

/** The signature of a canonical request (hex). */
export function signature(
  secretAccessKey: string,
  day: string,
  region: string,
  service: string,
  iso: string,
  canonicalRequest: string,
): string {
  const scope = `${day}/${region}/${service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', iso, scope, sha256Hex(canonicalRequest)].join('\n');
  let key = hmac(`AWS4${secretAccessKey}`, day);
  for (const part of [region, service, 'aws4_request']) key = hmac(key, part);
  return createHmac('sha256', key).update(toSign, 'utf8').digest('hex');
}

/** The credentials a Lambda function's role gives it, from its environment. */
export function credentialsFromEnv(env: NodeJS.ProcessEnv = process.env): AwsCredentials & {
  region: string;
} {
  const { AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION } = env;
  if (!AWS_ACCESS_KEY_ID || !AWS_SECRET_ACCESS_KEY || !AWS_REGION) {
    throw new Error(
      'signing an AWS request needs AWS credentials and AWS_REGION in the environment',
    );
  }
  return {
    accessKeyId: AWS_ACCESS_KEY_ID,
    secretAccessKey: AWS_SECRET_ACCESS_KEY,
    sessionToken: AWS_SESSION_TOKEN,
    region: AWS_REGION,
  };
}

/**
 * Signs a request with an Authorization header: answers the headers to send
 * (host, x-amz-date, x-amz-content-sha256, the session token, authorization).
 * `path` is sent as it is (already encoded; S3 does not encode it twice).
 */
export function signedHeaders(req: {
  method: string;
  host: string;
  path: string;
  /** The canonical query string (names sorted, names and values uriEncoded); none by default. */
  query?: string;
  /** The path as signed, when it differs from `path` (services other than S3 encode it again). */
  canonicalPath?: string;
  body?: Buffer | string;
  service: string;
  region: string;
  credentials: AwsCredentials;
  date?: Date;
}): Record<string, string> {
  const { iso, day } = amzDate(req.date ?? new Date());
  const headers: Record<string, string> = {
    host: req.host,
    'x-amz-content-sha256': sha256Hex(req.body ?? ''),
    'x-amz-date': iso,
    ...(req.credentials.sessionToken
      ? { 'x-amz-security-token': req.credentials.sessionToken }
      : {}),
  };
  const names = Object.keys(headers).sort();
  const canonical = [
    req.method,
    req.canonicalPath ?? req.path,
    req.query ?? '',
    ...names.map((n) => `${n}:${headers[n]}`),
    '',
    names.join(';'),
    headers['x-amz-content-sha256'],
  ].join('\n');
  const sig = signature(
    req.credentials.secretAccessKey,
    day,
    req.region,
    req.service,
    iso,
    canonical,
  );
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${req.credentials.accessKeyId}/${day}/${req.region}/${req.service}/aws4_request, SignedHeaders=${names.join(';')}, Signature=${sig}`;
  return headers;
}
