-- Issue #31 review: starting a sign-in writes nothing (an anonymous visitor
-- must not wake a paused database); its state, PKCE verifier and `next`
-- travel in the browser's sealed cookie. oauth_states now keeps only the
-- states used up at a callback (hashed, once), so a replayed callback signs
-- nobody in; rows older than a state's ten minutes are purged on the way.
alter table oauth_states drop column code_verifier, drop column next;
