// Posting to a WebSocket connection through API Gateway's management API
// (`POST {endpoint}/@connections/{id}`, SigV4 for service `execute-api`),
// with a plain signed request rather than the SDK's client. A 410 says the
// connection is gone (its registry entry is stale).
import { type AwsCredentials, credentialsFromEnv, signedHeaders, uriEncode } from '../aws-sign.ts';

export type PostResult = 'sent' | 'gone';

/** Posts `data` to connection `id`; answers `gone` for a connection API Gateway no longer has. */
export async function postToConnection(
  endpoint: string,
  id: string,
  data: string,
  config: () => AwsCredentials & { region: string } = credentialsFromEnv,
  timeoutMs = 2_000,
): Promise<PostResult> {
  const { region, ...credentials } = config();
  const base = new URL(endpoint);
  const stage = base.pathname.replace(/\/+$/, '');
  // As sent: the id encoded once. As signed: every segment encoded again
  // (SigV4's rule for every service but S3), as the SDK's signer does.
  const path = `${stage}/@connections/${encodeURIComponent(id)}`;
  const canonicalPath = path.split('/').map(uriEncode).join('/');
  const headers = signedHeaders({
    method: 'POST',
    host: base.host,
    path,
    canonicalPath,
    body: data,
    service: 'execute-api',
    region,
    credentials,
  });
  const res = await fetch(new URL(path, base), {
    method: 'POST',
    headers,
    body: data,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text().catch(() => '');
  if (res.status === 410) return 'gone';
  if (!res.ok) throw new Error(`POST @connections: HTTP ${res.status} ${text.slice(0, 300)}`);
  return 'sent';
}
