// The RDS IAM token is a SigV4 presigned request; it must equal what the AWS
// SDK's own signer (@smithy/signature-v4, which @aws-sdk/rds-signer uses)
// makes from the same credentials, host and time.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SignatureV4 } from '@smithy/signature-v4';
import { rdsIamToken } from '../../lib/db/iam-token.ts';
import { Sha256 } from '../helpers/sdk-sha256.ts';

for (const sessionToken of [undefined, 'IQoJb3JpZ2luX2VjE/+token=with&odd chars']) {
  test(`the token is the SDK signer's presigned connect request (${sessionToken ? 'with' : 'without'} a session token)`, async () => {
    const o = {
      host: 'conductor.cluster-abc.eu-west-1.rds.amazonaws.com',
      port: 5432,
      user: 'conductor_app',
      region: 'eu-west-1',
      accessKeyId: 'AKIDEXAMPLE',
      secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
      sessionToken,
      date: new Date('2026-03-04T05:06:07.890Z'),
    };
    const signer = new SignatureV4({
      credentials: { accessKeyId: o.accessKeyId, secretAccessKey: o.secretAccessKey, sessionToken },
      region: o.region,
      service: 'rds-db',
      sha256: Sha256,
    });
    const signed = await signer.presign(
      {
        method: 'GET',
        protocol: 'https:',
        hostname: o.host,
        port: o.port,
        path: '/',
        query: { Action: 'connect', DBUser: o.user },
        headers: { host: `${o.host}:${o.port}` },
      },
      { expiresIn: 900, signingDate: o.date },
    );
    const ours = new URL(`https://${rdsIamToken(o)}`);
    assert.equal(`${ours.hostname}:${ours.port}`, `${o.host}:${o.port}`);
    assert.deepEqual(
      Object.fromEntries(ours.searchParams),
      Object.fromEntries(Object.entries(signed.query ?? {}).map(([k, v]) => [k, String(v)])),
    );
  });
}
