// The bucket of artifacts and caches (docs/artifacts.md): private, TLS only,
// encrypted, with lifecycle rules as a backstop to the sweep's retention.
// Runners and browsers reach it only through URLs the api function presigns.
import {
  Duration,
  aws_iam as iam,
  type aws_lambda as lambda,
  RemovalPolicy,
  aws_s3 as s3,
} from 'aws-cdk-lib';
import type { Construct } from 'constructs';

/** The functions that presign, check and delete objects, and what each may do. */
export const ARTIFACT_ACTIONS = {
  // Presigning needs the rights the URL grants: uploads (single and
  // multipart), downloads and size checks (HeadObject is GetObject).
  api: ['s3:PutObject', 's3:GetObject', 's3:AbortMultipartUpload', 's3:DeleteObject'],
  // Retention deletes expired artifacts and abandoned uploads.
  sweep: ['s3:DeleteObject'],
} as const;

/** A bucket of the stack's: no public access, TLS only, S3-managed encryption, kept on delete. */
export function privateBucket(
  scope: Construct,
  id: string,
  lifecycleRules: s3.LifecycleRule[],
): s3.Bucket {
  return new s3.Bucket(scope, id, {
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    encryption: s3.BucketEncryption.S3_MANAGED,
    enforceSSL: true,
    lifecycleRules,
    // Emptying a bucket on delete takes a custom resource (another Lambda).
    removalPolicy: RemovalPolicy.RETAIN,
  });
}

/** The artifacts' bucket, with lifecycle rules as a backstop to retention. */
export function artifactsBucket(scope: Construct): s3.Bucket {
  return privateBucket(scope, 'ArtifactsBucket', [
    // A runner that died mid-upload leaves parts that cost storage until aborted.
    { abortIncompleteMultipartUploadAfter: Duration.days(1) },
    // The longest expire_in is 400 days: anything older was missed by retention.
    { expiration: Duration.days(401) },
  ]);
}

/** Gives a function the bucket's name and the actions ARTIFACT_ACTIONS lists for it. */
export function grantArtifacts(
  bucket: s3.Bucket,
  fn: lambda.Function,
  actions: readonly string[],
): void {
  fn.addToRolePolicy(
    new iam.PolicyStatement({ actions: [...actions], resources: [bucket.arnForObjects('*')] }),
  );
}
