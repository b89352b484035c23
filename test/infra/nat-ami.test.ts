// The NAT instance's AMI is pinned at launch (#32): the template names the
// SSM parameter for EC2 to resolve when it launches the instance, so an AMI
// release changes nothing in the template and no deploy replaces it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NAT_AMI_PARAMETER } from '../../infra/network.ts';
import { stubBundles, synth } from './support.ts';

test('the NAT instance names its AMI as resolve:ssm, resolved at launch, with no deploy-time parameter', () => {
  const { json } = synth(stubBundles());
  const nats = Object.values(json.Resources).filter(
    (r) => r.Type === 'AWS::EC2::Instance' && r.Properties?.InstanceType === 't4g.nano',
  );
  assert.equal(nats.length, 1);
  assert.equal(nats[0]!.Properties?.ImageId, `resolve:ssm:${NAT_AMI_PARAMETER}`);
  const params = (json as { Parameters?: Record<string, { Default?: string }> }).Parameters ?? {};
  assert.ok(
    !Object.values(params).some((p) => String(p.Default).includes('ami-amazon-linux-latest')),
    'no SSM parameter resolved at each deploy',
  );
});
