// Shared by the infra tests: stand-in bundles (the stack tests look at the
// template, not at the code, so they need not wait for esbuild), synthesis,
// and readers for the template's resources.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import { App, type Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { ConductorStack, type ConductorStackProps } from '../../infra/stack.ts';
import { FUNCTION_NAMES, MIGRATIONS_HASH_FILE } from '../../scripts/bundle.ts';

/** A directory shaped like dist/functions, with a one-line handler per function. */
export function stubBundles(marker = 'stub'): string {
  const dir = mkdtempSync(join(tmpdir(), 'conductor-bundles-'));
  after(() => rmSync(dir, { recursive: true, force: true }));
  for (const name of FUNCTION_NAMES) {
    mkdirSync(join(dir, name));
    writeFileSync(
      join(dir, name, 'index.mjs'),
      `export const handler = async () => ${JSON.stringify(`${marker}:${name}`)};\n`,
    );
  }
  writeFileSync(join(dir, 'migrate', MIGRATIONS_HASH_FILE), `${'0'.repeat(64)}\n`);
  return dir;
}

export interface Synthesised {
  stack: ConductorStack;
  template: Template;
  json: TemplateJson;
}

// Synthesis checks each template against CloudFormation's schemas (aws-cdk-lib's
// built-in validation), ~4 s of CPU on a process's first synth. The tests that
// read templates turn it off; `validatedSynth` keeps it (test/infra/stack.test.ts
// runs it on every shape, and `npm run synth` in test/infra/bundle.test.ts).
process.env.CDK_VALIDATION = 'false';

/** Synthesises a Conductor stack with these props and stand-in bundles. */
export function synth(bundleDir: string, props: ConductorStackProps = {}): Synthesised {
  const app = new App({ analyticsReporting: false });
  const stack = new ConductorStack(app, 'Conductor', { bundleDir, ...props });
  const template = Template.fromStack(stack);
  return { stack, template, json: template.toJSON() as TemplateJson };
}

export interface Resource {
  Type: string;
  Properties: Record<string, unknown>;
  DependsOn?: string[];
}
export interface TemplateJson {
  Resources: Record<string, Resource>;
}

/** The resources of a type, as [logical id, resource] pairs. */
export function resourcesOf(json: TemplateJson, type: string): [string, Resource][] {
  return Object.entries(json.Resources).filter(([, r]) => r.Type === type);
}

/** The logical id of a construct's CloudFormation resource. */
export function logicalId(stack: Stack, construct: { node: { defaultChild?: unknown } }): string {
  return stack.getLogicalId(construct.node.defaultChild as never);
}

export interface Statement {
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: Record<string, Record<string, unknown>>;
}

/** Every statement of every inline policy, with the role logical ids it is attached to. */
export function policyStatements(json: TemplateJson): { roles: string[]; statement: Statement }[] {
  const out: { roles: string[]; statement: Statement }[] = [];
  for (const [, policy] of resourcesOf(json, 'AWS::IAM::Policy')) {
    const props = policy.Properties as {
      PolicyDocument: { Statement: Statement[] };
      Roles?: { Ref: string }[];
    };
    const roles = (props.Roles ?? []).map((r) => r.Ref);
    for (const statement of props.PolicyDocument.Statement) out.push({ roles, statement });
  }
  for (const [id, role] of resourcesOf(json, 'AWS::IAM::Role')) {
    const inline = (role.Properties.Policies ?? []) as {
      PolicyDocument: { Statement: Statement[] };
    }[];
    for (const p of inline) {
      for (const statement of p.PolicyDocument.Statement) out.push({ roles: [id], statement });
    }
  }
  return out;
}

export const asList = <T>(value: T | T[]): T[] => (Array.isArray(value) ? value : [value]);

/** What synthesis with CloudFormation's schema check found, and what it let pass as acknowledged. */
/** A VPC and a database the stack is given instead of making its own (`existingVpc`, `existingDatabase`). */
export const EXISTING_RESOURCES = {
  existingVpc: {
    vpcId: 'vpc-0123456789abcdef0',
    availabilityZones: ['eu-west-1a', 'eu-west-1b'],
    privateSubnetIds: ['subnet-0aaaaaaaaaaaaaaa1', 'subnet-0aaaaaaaaaaaaaaa2'],
  },
  existingDatabase: {
    secretArn: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:conductor-db-AbCdEf',
    host: 'db.internal.example',
    securityGroupId: 'sg-0123456789abcdef0',
  },
} satisfies ConductorStackProps;

export interface ValidationFindings {
  violations: Array<{ ruleName: string; description: string }>;
  acknowledged: Array<{ ruleName: string; acknowledgedId: string; reason: string }>;
}

/** Synthesises with the schema check on (as `npm run synth` does) and reads its report. */
export function validatedSynth(
  bundleDir: string,
  props: ConductorStackProps = {},
): ValidationFindings {
  const before = process.env.CDK_VALIDATION;
  delete process.env.CDK_VALIDATION;
  try {
    const app = new App({ analyticsReporting: false, outdir: mkdtempSync(join(tmpdir(), 'cdk-')) });
    after(() => rmSync(app.outdir, { recursive: true, force: true }));
    new ConductorStack(app, 'Conductor', { bundleDir, ...props });
    const assembly = app.synth();
    const report = JSON.parse(
      readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'),
    ) as {
      pluginReports: Array<{
        violations: ValidationFindings['violations'];
        suppressedViolations?: ValidationFindings['acknowledged'];
      }>;
    };
    return {
      violations: report.pluginReports.flatMap((r) => r.violations),
      acknowledged: report.pluginReports.flatMap((r) => r.suppressedViolations ?? []),
    };
  } finally {
    if (before === undefined) delete process.env.CDK_VALIDATION;
    else process.env.CDK_VALIDATION = before;
  }
}
