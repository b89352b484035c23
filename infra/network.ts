// The network: a VPC of its own (or an existing one, given by ids), the
// subnets the functions and the database use, and the one security group
// every function shares.
import { aws_ec2 as ec2, Validations } from 'aws-cdk-lib';
import type { Construct } from 'constructs';

/** An existing VPC, given by ids so that synthesis looks nothing up. */
export interface ExistingVpc {
  vpcId: string;
  /** The availability zones of the subnets, in the same order. */
  availabilityZones: string[];
  /** Private subnets with a route to the internet (NAT): the functions and the proxy run here. */
  privateSubnetIds: string[];
  /** Subnets for the database; default: the private subnets. */
  isolatedSubnetIds?: string[];
}

/** The Amazon Linux 2023 arm64 AMI's public SSM parameter, resolved when the NAT instance launches. */
export const NAT_AMI_PARAMETER =
  '/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64';

export interface NetworkProps {
  existingVpc?: ExistingVpc;
  /** A created VPC's way out to the forges: a NAT gateway or a t4g.nano NAT instance. */
  nat: 'gateway' | 'instance';
}

/**
 * The VPC, its subnet selections and the functions' security group. Like the
 * other parts of the stack (database.ts, functions.ts, alarms.ts) it adds its
 * resources to the stack itself rather than under a construct of its own, so
 * their logical ids stay those of the deployed stack: under a new parent
 * every id would change, and CloudFormation would replace the database.
 */
export class Network {
  readonly vpc: ec2.IVpc;
  readonly functionSubnets: ec2.SubnetSelection;
  readonly databaseSubnets: ec2.SubnetSelection;
  readonly functionsSecurityGroup: ec2.SecurityGroup;

  constructor(scope: Construct, props: NetworkProps) {
    this.vpc = props.existingVpc
      ? ec2.Vpc.fromVpcAttributes(scope, 'Vpc', {
          vpcId: props.existingVpc.vpcId,
          availabilityZones: props.existingVpc.availabilityZones,
          privateSubnetIds: props.existingVpc.privateSubnetIds,
          isolatedSubnetIds: props.existingVpc.isolatedSubnetIds,
        })
      : createVpc(scope, props.nat);
    this.functionSubnets = { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS };
    this.databaseSubnets =
      !props.existingVpc || props.existingVpc.isolatedSubnetIds?.length
        ? { subnetType: ec2.SubnetType.PRIVATE_ISOLATED }
        : this.functionSubnets;

    // Every function shares one group; the database (or the proxy) lets in
    // this group and nothing else. Outbound is open: the forges (a Gitea on
    // any port), Secrets Manager and Lambda are reached through the NAT.
    this.functionsSecurityGroup = new ec2.SecurityGroup(scope, 'FunctionsSecurityGroup', {
      vpc: this.vpc,
      description: 'Conductor functions',
      allowAllOutbound: true,
    });
  }
}

function createVpc(scope: Construct, nat: 'gateway' | 'instance'): ec2.Vpc {
  let natGatewayProvider: ec2.NatProvider;
  let natInstances: ec2.NatInstanceProviderV2 | undefined;
  if (nat === 'instance') {
    natInstances = ec2.NatProvider.instanceV2({
      instanceType: new ec2.InstanceType('t4g.nano'),
      // Pinned at launch: the template names the SSM parameter itself
      // (`resolve:ssm:…`, which EC2 resolves when it launches the instance),
      // not the AMI it resolved to at deploy time. So the template does not
      // change when Amazon releases an AMI, and no later deploy replaces the
      // instance (an egress gap and a new address); a new AMI comes only
      // with a new instance. No lookup at synthesis either.
      machineImage: ec2.MachineImage.resolveSsmParameterAtLaunch(NAT_AMI_PARAMETER, {
        os: ec2.OperatingSystemType.LINUX,
      }),
      // Standard credits: a busy NAT instance slows down instead of billing more.
      creditSpecification: ec2.CpuCredits.STANDARD,
      // Inbound only from inside the VPC (set below, once the VPC exists).
      defaultAllowedTraffic: ec2.NatTrafficDirection.OUTBOUND_ONLY,
    });
    natGatewayProvider = natInstances;
  } else {
    natGatewayProvider = ec2.NatProvider.gateway();
  }
  const vpc = new ec2.Vpc(scope, 'Vpc', {
    maxAzs: 2,
    // One NAT for both zones: the cheap choice. A zone outage then also
    // cuts the other zone's functions off from the forges.
    natGateways: 1,
    natGatewayProvider,
    subnetConfiguration: [
      { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
      { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
      { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
    ],
    // Restricting the default group takes a custom resource (another
    // Lambda); nothing here uses the default group.
    restrictDefaultSecurityGroup: false,
    // Free: S3 traffic (CloudFormation's custom resource answers) skips the NAT.
    gatewayEndpoints: { S3: { service: ec2.GatewayVpcEndpointAwsService.S3 } },
  });
  natInstances?.connections.allowFrom(ec2.Peer.ipv4(vpc.vpcCidrBlock), ec2.Port.allTraffic());
  if (natInstances) {
    // Synthesis checks the template against CloudFormation's schemas, whose
    // ImageId pattern does not know `resolve:ssm:` (a dynamic reference EC2
    // resolves at launch, above): without this, every synth warns of it.
    Validations.of(vpc).acknowledge({
      id: 'CloudFormation-Validate::E1152',
      reason: 'the NAT instance ImageId is a resolve:ssm: dynamic reference, resolved at launch',
    });
  }
  return vpc;
}
