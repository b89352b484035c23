// The application's own secrets: the sealing key and the admin token.
import { RemovalPolicy, aws_secretsmanager as secretsmanager } from 'aws-cdk-lib';
import type { Construct } from 'constructs';

/**
 * The sealing key (64 hex digits, 32 bytes), read only by the functions that
 * seal or open secrets, and the admin token (the app secret,
 * `{"admin_token"}`), read only by the api. Neither value is in the template.
 * The app secret once carried the key too; it keeps its logical id, so an
 * upgrade regenerates its value (a new admin token) instead of orphaning it.
 * An operator adds the sign-in's OAuth clients to the app secret
 * (`github_client_id`, `github_client_secret`, `gitea_url`, ...: docs/deploy.md,
 * "Sign-in with GitHub or Gitea"); lib/app/people.ts reads them.
 */
export function createAppSecrets(scope: Construct): {
  secretKey: secretsmanager.Secret;
  appSecret: secretsmanager.Secret;
} {
  const secretKey = new secretsmanager.Secret(scope, 'SecretKey', {
    description: 'Conductor: the key that seals secrets at rest. Keep it.',
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
  const appSecret = new secretsmanager.Secret(scope, 'AppSecret', {
    description: 'Conductor: {"admin_token"}, read by the api function at cold start',
    generateSecretString: {
      secretStringTemplate: '{}',
      generateStringKey: 'admin_token',
      passwordLength: 48,
      excludePunctuation: true,
      includeSpace: false,
    },
    removalPolicy: RemovalPolicy.RETAIN,
  });
  return { secretKey, appSecret };
}

/**
 * The GitHub App's secret (`-c githubApp=true`): `{"webhook_secret"}`
 * generated, to be pasted into the app's settings on GitHub, and `app_id` and
 * `private_key` (the .pem's text) added by the operator (docs/deploy.md, "The
 * GitHub App"). Read at cold start by the functions that call GitHub.
 */
export function createGitHubAppSecret(scope: Construct): secretsmanager.Secret {
  return new secretsmanager.Secret(scope, 'GitHubAppSecret', {
    description:
      'Conductor: the GitHub App, {"app_id", "private_key", "webhook_secret"}; add app_id and private_key',
    generateSecretString: {
      secretStringTemplate: '{}',
      generateStringKey: 'webhook_secret',
      passwordLength: 40,
      excludePunctuation: true,
      includeSpace: false,
    },
    removalPolicy: RemovalPolicy.RETAIN,
  });
}
