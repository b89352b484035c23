// An RDS IAM authentication token: the password of a database user granted
// rds_iam, valid 15 minutes, made locally from the function's own AWS
// credentials (no network call). It is a SigV4 presigned `connect` request
// for service rds-db, as @aws-sdk/rds-signer makes it; written out here
// because the signer package would bring the SDK's credential chain along,
// and the functions already have their credentials in the environment.
import { createHash, createHmac } from 'node:crypto';

export interface IamTokenOptions {
  host: string;
  port: number;
  user: string;
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  /** Default: now. */
  date?: Date;
}

const EXPIRES_S = 900;

// RFC 3986 unreserved characters stay, everything else is %XX (SigV4's rule).
const encode = (s: string) =>
  encodeURIComponent(s).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const hmac = (key: Buffer | string, s: string) =>
  createHmac('sha256', key).update(s, 'utf8').digest();

/** The token to send as the password of `user` at `host:port`. */
export function rdsIamToken(o: IamTokenOptions): string {
  const iso = (o.date ?? new Date())
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
  const day = iso.slice(0, 8);
  const scope = `${day}/${o.region}/rds-db/aws4_request`;
  const params: Record<string, string> = {
    Action: 'connect',
    DBUser: o.user,
    'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
    'X-Amz-Credential': `${o.accessKeyId}/${scope}`,
    'X-Amz-Date': iso,
    'X-Amz-Expires': String(EXPIRES_S),
    ...(o.sessionToken ? { 'X-Amz-Security-Token': o.sessionToken } : {}),
    'X-Amz-SignedHeaders': 'host',
  };
  const query = Object.keys(params)
    .sort()
    .map((k) => `${encode(k)}=${encode(params[k]!)}`)
    .join('&');
  const hostHeader = `${o.host}:${o.port}`;
  const request = ['GET', '/', query, `host:${hostHeader}`, '', 'host', sha256('')].join('\n');
  const toSign = ['AWS4-HMAC-SHA256', iso, scope, sha256(request)].join('\n');
  let key = hmac(`AWS4${o.secretAccessKey}`, day);
  for (const part of [o.region, 'rds-db', 'aws4_request']) key = hmac(key, part);
  const signature = createHmac('sha256', key).update(toSign, 'utf8').digest('hex');
  return `${hostHeader}/?${query}&X-Amz-Signature=${signature}`;
}

/** A token maker from a Lambda's environment (its role's credentials and region). */
export function iamPassword(
  target: { host: string; port: number; user: string },
  env: NodeJS.ProcessEnv = process.env,
): () => Promise<string> {
  return async () => {
    const { AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION } = env;
    if (!AWS_ACCESS_KEY_ID || !AWS_SECRET_ACCESS_KEY || !AWS_REGION) {
      throw new Error('IAM database authentication needs AWS credentials and AWS_REGION');
    }
    return rdsIamToken({
      ...target,
      region: AWS_REGION,
      accessKeyId: AWS_ACCESS_KEY_ID,
      secretAccessKey: AWS_SECRET_ACCESS_KEY,
      sessionToken: AWS_SESSION_TOKEN,
    });
  };
}
