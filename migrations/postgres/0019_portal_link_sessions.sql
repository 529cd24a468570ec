-- A portal session remembers the link it was made from, so that an admin
-- who revokes the link ends the session too (a leaked link, a customer who
-- left). Sessions made before this migration have none: they end at their
-- expiry, a day at most. The index serves revocation and the list of
-- links, which look sessions up by their link.
ALTER TABLE hymical_access ADD COLUMN link_id text COLLATE "C";
CREATE INDEX hymical_access_link ON hymical_access (link_id) WHERE link_id IS NOT NULL;
-- The list of links is read a page at a time, newest first: this index
-- gives each page without reading the other credentials or sorting.
CREATE INDEX hymical_access_portal_links ON hymical_access (created_at, id) WHERE kind = 'portal_link';
