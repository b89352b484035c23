// The application's own secrets: the sealing key and the admin token.
import { RemovalPolicy, aws_secretsmanager as secretsmanager } from 'aws-cdk-lib';
import type { Construct } from 'constructs';

/**
 * The app secret, `{"admin_token", "secret_key"}`. Secrets Manager generates
 * one value per secret, and the app secret needs two. The sealing key is
 * generated in a secret of its own (64 hex digits, 32 bytes) and copied into
 * the app secret's template through a dynamic reference that CloudFormation
 * resolves; the admin token is generated into the app secret itself. Neither
 * value is in the template.
 */
export function createAppSecret(scope: Construct): secretsmanager.Secret {
  const secretKey = new secretsmanager.Secret(scope, 'SecretKey', {
    description:
      'Conductor: the key that seals secrets at rest; copied into the app secret. Keep it.',
    generateSecretString: {
      passwordLength: 64,
      excludeUppercase: true,
      excludePunctuation: true,
      excludeCharacters: 'ghijklmnopqrstuvwxyz',
      includeSpace: false,
    },
    // Losing this key loses every sealed secret, webhook secret and forge token.
    removalPolicy: RemovalPolicy.RETAIN,
  });
  return new secretsmanager.Secret(scope, 'AppSecret', {
    description: 'Conductor: {"admin_token", "secret_key"}, read by every function at cold start',
    generateSecretString: {
      secretStringTemplate: `{"secret_key":"${secretKey.secretValue.unsafeUnwrap()}"}`,
      generateStringKey: 'admin_token',
      passwordLength: 48,
      excludePunctuation: true,
      includeSpace: false,
    },
    removalPolicy: RemovalPolicy.RETAIN,
  });
}
