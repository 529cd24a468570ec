-- Every completion batch ends by letting the next delivery of its ordered
-- endpoints go (hymical_promote). As a statement, that read the batch's
-- deliveries to find their endpoints, and PostgreSQL planned it afresh
-- nearly every time (a custom plan for each array of ids), even when no
-- endpoint is ordered. hymical_promote_of does the same from inside a
-- function: a call with one parameter is planned in microseconds, and
-- with no ordered endpoint at all it stops after one probe of this index.
CREATE INDEX webhook_endpoints_ordered ON webhook_endpoints (id) WHERE ordered;

CREATE FUNCTION hymical_promote_of(delivery_ids text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE ordered) THEN
        RETURN;
    END IF;
    PERFORM hymical_promote(ARRAY(
        SELECT DISTINCT d.endpoint_id FROM webhook_deliveries AS d WHERE d.id = ANY (delivery_ids)));
END
$$;
