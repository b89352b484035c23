export {
  type FetchResult,
  ForgeUnavailableError,
  fetchPipelineFile,
  isLocalRepo,
  type PipelineSource,
} from './pipeline-file.ts';
export {
  type ForgeKind,
  isCommitSha,
  parseWebhook,
  readWebhookHeaders,
  signBody,
  verifySignature,
  WEBHOOK_HEADERS,
  type WebhookHeaders,
  type WebhookIntent,
} from './webhook.ts';
