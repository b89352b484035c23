-- A project's default branch, as the forge's webhooks say it
-- (`repository.default_branch`, in GitHub's and Gitea's push and pull
-- request payloads): the branch whose caches every job may read, and the
-- branch the Run form offers. Null until a webhook has said it; 'main' is
-- assumed until then.
alter table projects add column default_branch text
  check (default_branch is null or length(default_branch) between 1 and 255);
