export type { Forge, ForgeKind, RepoPermission, WebhookIntent } from './forge.ts';
export {
  type FetchResult,
  ForgeUnavailableError,
  fetchPipelineFile,
  isLocalRepo,
  type PipelineSource,
} from './pipeline-file.ts';
export { findForge, forgeName, forgeOf } from './registry.ts';
export {
  isCommitSha,
  parseWebhook,
  readWebhookHeaders,
  signBody,
  verifySignature,
  type WebhookHeaders,
  webhookHeaders,
} from './webhook.ts';
