-- Room on each page for the rows every spend batch updates: a key's spend
-- (and its user's, team's, organization's, end user's, team membership's)
-- and its daily rows get a new version each batch. On a full page (the
-- default fill factor, 100) that version goes to another page and into
-- every index of the table (six on the keys, seven on each daily table);
-- with half of each page kept free it stays on its page (a heap-only
-- update) and no index is touched, and the page's dead versions are
-- pruned as it fills. Measured at 1,000 keys a batch: about a third of
-- the Postgres CPU of the keys' and daily rows' updates (BENCHMARKS.md).
-- Applies to pages filled from now on (existing rows move to such pages
-- as they are updated, or at once with VACUUM FULL); tables twice the
-- size. A storage parameter only: LiteLLM's schema is unchanged and the
-- statement takes no lock that blocks reads or writes.
ALTER TABLE "LiteLLM_VerificationToken" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_UserTable" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_TeamTable" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_OrganizationTable" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_EndUserTable" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_TeamMembership" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_DailyUserSpend" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_DailyTeamSpend" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_DailyOrganizationSpend" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_DailyEndUserSpend" SET (fillfactor = 50);
ALTER TABLE "LiteLLM_DailyTagSpend" SET (fillfactor = 50);
