-- A project added from the page (issue #53): the id of the webhook Conductor
-- asked the forge to make for it, so that deleting the project deletes that
-- hook too. Null for a project whose webhook someone set up by hand.
alter table projects add column forge_hook_id text
  check (forge_hook_id is null or length(forge_hook_id) between 1 and 100);
