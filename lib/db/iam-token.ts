// An RDS IAM authentication token: the password of a database user granted
// rds_iam, valid 15 minutes, made locally from the function's own AWS
// credentials (no network call). It is a SigV4 presigned `connect` request
// for service rds-db, as @aws-sdk/rds-signer makes it; written out here
// because the signer package would bring the SDK's credential chain along,
// and the functions already have their credentials in the environment.
import { amzDate, credentialsFromEnv, sha256Hex, signature, uriEncode } from '../aws-sign.ts';

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

/** The token to send as the password of `user` at `host:port`. */
export function rdsIamToken(o: IamTokenOptions): string {
  const { iso, day } = amzDate(o.date ?? new Date());
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
    .map((k) => `${uriEncode(k)}=${uriEncode(params[k]!)}`)
    .join('&');
  const hostHeader = `${o.host}:${o.port}`;
  const request = ['GET', '/', query, `host:${hostHeader}`, '', 'host', sha256Hex('')].join('\n');
  const sig = signature(o.secretAccessKey, day, o.region, 'rds-db', iso, request);
  return `${hostHeader}/?${query}&X-Amz-Signature=${sig}`;
}

/** A token maker from a Lambda's environment (its role's credentials and region). */
export function iamPassword(
  target: { host: string; port: number; user: string },
  env: NodeJS.ProcessEnv = process.env,
): () => Promise<string> {
  return async () => rdsIamToken({ ...target, ...credentialsFromEnv(env) });
}
