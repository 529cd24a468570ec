package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hymical/hymical/storage"
)

const endpointColumns = `id, transport, url, config, event_types, form_ids, secrets, description,
	disabled_at, created_at, updated_at, disabled_reason, failing_since, rate_limit, rate_burst,
	max_in_flight, ordered, retry_schedule, deleted_at, headers`

// endpointRow is an endpoint in its column encoding.
type endpointRow struct {
	config, eventTypes, formIDs, secrets, retrySchedule, headers string
}

// EndpointCreate inserts the endpoint. ID defaults to a new "ep" id,
// CreatedAt to now and UpdatedAt to CreatedAt. With p.Idempotency, it does
// so unless the key was used within its window. The writer's IMMEDIATE
// transaction holds the write lock from its first statement, so the key
// cannot be taken between the look and the insert, by this process or
// another on the same file.
func (s *Store) EndpointCreate(ctx context.Context, p storage.EndpointCreateParams) (storage.EndpointCreateResult, error) {
	const op = "create endpoint"
	if err := p.Validate(); err != nil {
		return storage.EndpointCreateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	key := p.Idempotency
	now := s.now(p.Now)
	if key != nil && p.Endpoint.CreatedAt.IsZero() {
		p.Endpoint.CreatedAt = now // the key's record and the endpoint share one instant
	}
	e, row, err := s.prepareEndpoint(p.Endpoint)
	if err != nil {
		return storage.EndpointCreateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var res storage.EndpointCreateResult
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		if key == nil {
			out, err := s.insertEndpoint(ctx, tx, e, row)
			res = storage.EndpointCreateResult{Endpoint: out}
			return err
		}
		rec, held, err := heldKey(ctx, tx, *key, now)
		if err != nil {
			return err
		}
		if held {
			if err := rec.repeats(storage.OpEndpointCreate, "", key.RequestHash); err != nil {
				return err
			}
			firstID := rec.endpointID.String
			first, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = ?`, firstID), s.secrets)
			if err != nil {
				return err
			}
			if first.DeletedAt != nil {
				return fmt.Errorf("%w: the idempotency key created endpoint %s, deleted since", storage.ErrDeleted, firstID)
			}
			res = storage.EndpointCreateResult{Endpoint: first, Duplicate: true}
			return nil
		}
		// A new key, or one whose window is over: it is this create's now.
		out, err := s.insertEndpoint(ctx, tx, e, row)
		if err != nil {
			return err
		}
		if err := recordKey(ctx, tx, key.Key, keyRecord{
			operation: storage.OpEndpointCreate, requestHash: key.RequestHash, endpointID: validString(out.ID),
		}, now); err != nil {
			return err
		}
		res = storage.EndpointCreateResult{Endpoint: out}
		return nil
	})
	if err != nil {
		return storage.EndpointCreateResult{}, err
	}
	return res, nil
}

// EndpointRotate writes the rotated endpoint and, with p.Idempotency, its
// key in one IMMEDIATE transaction, or answers a repeat from the key's
// record.
func (s *Store) EndpointRotate(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error) {
	op := "rotate endpoint secret " + p.Endpoint.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	e := p.Endpoint
	e.NormalizeControls()
	row, err := encodeEndpoint(e, s.secrets)
	if err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var readAt any // NULL: unconditional
	if !e.UpdatedAt.IsZero() {
		readAt = micros(e.UpdatedAt)
	}
	now := s.now(p.Now)
	var (
		res      storage.EndpointRotateResult
		released bool
	)
	key := p.Idempotency
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		var (
			rec  keyRecord
			held bool
		)
		if key != nil {
			var err error
			if rec, held, err = heldKey(ctx, tx, *key, now); err != nil {
				return err
			}
		}
		if held {
			if err := rec.repeats(storage.OpEndpointRotateSecret, e.ID, key.RequestHash); err != nil {
				return err
			}
			cur, err := scanEndpoint(tx.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = ?`, e.ID), s.secrets)
			if err != nil {
				return err
			}
			if cur.DeletedAt != nil {
				return fmt.Errorf("%w: the idempotency key rotated the secret of endpoint %s, deleted since at %s",
					storage.ErrDeleted, e.ID, cur.DeletedAt.UTC().Format(time.RFC3339))
			}
			res = storage.EndpointRotateResult{Endpoint: cur, SecretSHA256: rec.secretSHA256.String, Duplicate: true}
			if rec.secretsExpireAt.Valid {
				at := fromMicros(rec.secretsExpireAt.Int64)
				res.PreviousSecretsExpireAt = &at
			}
			return nil
		}
		out, rel, err := s.updateEndpoint(ctx, tx, e, row, readAt)
		if err != nil {
			return err
		}
		released = rel
		res = storage.EndpointRotateResult{Endpoint: out, SecretSHA256: p.SecretSHA256, PreviousSecretsExpireAt: p.PreviousSecretsExpireAt}
		if key == nil {
			return nil
		}
		return recordKey(ctx, tx, key.Key, keyRecord{
			operation: storage.OpEndpointRotateSecret, requestHash: key.RequestHash,
			endpointID: validString(e.ID), secretSHA256: validString(p.SecretSHA256),
			secretsExpireAt: nullMicros(p.PreviousSecretsExpireAt),
		}, now)
	})
	if err != nil {
		return storage.EndpointRotateResult{}, err
	}
	if released {
		s.wake.Signal()
	}
	return res, nil
}

// EndpointGet reads one endpoint.
func (s *Store) EndpointGet(ctx context.Context, id string) (storage.Endpoint, error) {
	e, err := scanEndpoint(s.reader.QueryRowContext(ctx,
		`SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = ?`, id), s.secrets)
	if err != nil {
		return storage.Endpoint{}, s.mapErr("get endpoint "+id, err)
	}
	return e, nil
}

// EndpointList returns every endpoint that is not deleted, ordered by id.
func (s *Store) EndpointList(ctx context.Context) ([]storage.Endpoint, error) {
	out, err := listEndpoints(ctx, s.reader, s.secrets)
	if err != nil {
		return nil, s.mapErr("list endpoints", err)
	}
	return out, nil
}

// EndpointListPage returns a page of the endpoints that are not deleted,
// newest (highest id) first, starting after the cursor p.Before.
func (s *Store) EndpointListPage(ctx context.Context, p storage.EndpointListParams) ([]storage.Endpoint, error) {
	query, args := `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE deleted_at IS NULL AND (? = '' OR id < ?)
		ORDER BY id DESC LIMIT ?`, []any{p.Before, p.Before, p.PageSize()}
	if p.Forms != nil {
		// In a scope: listed under one of its forms in
		// webhook_endpoint_forms (so an endpoint of every form, which has
		// no rows there, is not), and under none outside it. The triggers
		// keep that table to form_ids.
		query = `SELECT ` + endpointColumns + ` FROM webhook_endpoints AS e
			WHERE e.deleted_at IS NULL AND (? = '' OR e.id < ?)
				AND e.id IN (SELECT f.endpoint_id FROM webhook_endpoint_forms AS f
					WHERE f.form_id IN (SELECT value FROM json_each(?)))
				AND NOT EXISTS (SELECT 1 FROM webhook_endpoint_forms AS o
					WHERE o.endpoint_id = e.id AND o.form_id NOT IN (SELECT value FROM json_each(?)))
			ORDER BY e.id DESC LIMIT ?`
		forms := jsonList(p.Forms)
		args = []any{p.Before, p.Before, forms, forms, p.PageSize()}
	}
	rows, err := s.reader.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.mapErr("list endpoints", err)
	}
	defer rows.Close()
	out := []storage.Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows, s.secrets)
		if err != nil {
			return nil, s.mapErr("list endpoints", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr("list endpoints", err)
	}
	return out, nil
}

// EndpointLastErrors reads the last error of each failing endpoint of
// ids in one query. SQLite has no LATERAL, so the window is a range: the
// endpoint's deliveries from its LastErrorWindow-th newest id up, newest
// first, each with its latest attempt through the (delivery_id, number)
// key. INDEXED BY keeps the walk on (endpoint_id, id): the planner could
// otherwise take another index that starts with endpoint_id and sort all
// of the endpoint's deliveries.
func (s *Store) EndpointLastErrors(ctx context.Context, ids []string) (map[string]string, error) {
	const op = "endpoint last errors"
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT id, err FROM (
		SELECT ep.id AS id, (
			SELECT CASE WHEN d.unsent_reason <> '' THEN d.unsent_reason ELSE coalesce((
				SELECT CASE WHEN a.outcome <> 'delivered' THEN a.error ELSE '' END
				FROM webhook_delivery_attempts AS a WHERE a.delivery_id = d.id
				ORDER BY a.number DESC LIMIT 1), '') END AS msg
			FROM webhook_deliveries AS d INDEXED BY webhook_deliveries_endpoint
			WHERE d.endpoint_id = ep.id AND d.id >= coalesce((
				SELECT w.id FROM webhook_deliveries AS w INDEXED BY webhook_deliveries_endpoint
				WHERE w.endpoint_id = ep.id ORDER BY w.id DESC LIMIT 1 OFFSET ?), '')
			AND msg <> ''
			ORDER BY d.id DESC LIMIT 1) AS err
		FROM webhook_endpoints AS ep
		WHERE ep.id IN (SELECT value FROM json_each(?)) AND ep.failing_since IS NOT NULL)
		WHERE err IS NOT NULL`, storage.LastErrorWindow-1, jsonList(ids))
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, msg string
		if err := rows.Scan(&id, &msg); err != nil {
			return nil, s.mapErr(op, err)
		}
		out[id] = msg
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr(op, err)
	}
	return out, nil
}

// EndpointDelete soft-deletes the endpoint p.ID. Fan-out and replay run in
// the writer's IMMEDIATE transactions too, so none of them can be between
// reading the endpoint and writing a delivery while the delete runs: what
// they write before it, the delete sees; after it, they see the delete.
func (s *Store) EndpointDelete(ctx context.Context, p storage.EndpointDeleteParams) (storage.EndpointDeleteResult, error) {
	op := "delete endpoint " + p.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointDeleteResult{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	now := micros(s.now(p.Now))
	var res storage.EndpointDeleteResult
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		var deleted sql.NullInt64
		var updated int64
		if err := tx.QueryRowContext(ctx, `SELECT deleted_at, updated_at FROM webhook_endpoints WHERE id = ?`, p.ID).Scan(&deleted, &updated); err != nil {
			return err // sql.ErrNoRows becomes ErrNotFound
		}
		if deleted.Valid {
			return fmt.Errorf("%w at %s", storage.ErrDeleted, fromMicros(deleted.Int64).Format(time.RFC3339))
		}
		if !p.UpdatedAt.IsZero() && updated != micros(p.UpdatedAt) {
			return fmt.Errorf("%w: it changed since it was read at %s; read it again and decide again",
				storage.ErrConflict, p.UpdatedAt.UTC().Format(time.RFC3339Nano))
		}
		if err := tx.QueryRowContext(ctx, `
			SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'processing')
			FROM webhook_deliveries WHERE endpoint_id = ? AND state IN ('pending', 'processing')`, p.ID).
			Scan(&res.Pending, &res.Processing); err != nil {
			return err
		}
		if (res.Pending > 0 || res.Processing > 0) && !p.Force {
			return fmt.Errorf("%w: %d pending, %d processing", storage.ErrEndpointBusy, res.Pending, res.Processing)
		}
		// A processing delivery loses its token here, so its worker's
		// completion is fenced out and can only record a late attempt.
		if _, err := tx.ExecContext(ctx, `
			UPDATE webhook_deliveries
			SET state = 'failed', completed_at = ?, held = 0, claim_token = NULL, claim_expires_at = NULL,
				unsent_reason = ?
			WHERE endpoint_id = ? AND state IN ('pending', 'processing')`,
			now, storage.EndpointDeletedReason, p.ID); err != nil {
			return err
		}
		var err error
		res.Endpoint, err = scanEndpoint(tx.QueryRowContext(ctx, `
			UPDATE webhook_endpoints SET deleted_at = ?, turn_delivery_id = NULL WHERE id = ?
			RETURNING `+endpointColumns, now, p.ID), s.secrets)
		return err
	})
	if err != nil {
		return res, err
	}
	return res, nil
}

// EndpointUpdate replaces every mutable field of endpoint e.ID and sets
// updated_at to the Go clock. ID, CreatedAt and FailingSince are kept, but
// enabling a disabled endpoint clears FailingSince. When the endpoint is
// disabled, enabled, or its ordering changes, its pending deliveries are
// held or released to match in the same transaction.
func (s *Store) EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
	op := "update endpoint " + e.ID
	if e.ID == "" {
		return storage.Endpoint{}, fmt.Errorf("sqlite: update endpoint: %w: endpoint id is required", storage.ErrInvalid)
	}
	if err := e.Validate(); err != nil {
		return storage.Endpoint{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	e.NormalizeControls()
	row, err := encodeEndpoint(e, s.secrets)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var readAt any // NULL: unconditional
	if !e.UpdatedAt.IsZero() {
		readAt = micros(e.UpdatedAt)
	}
	var out storage.Endpoint
	released := false
	err = s.write(ctx, op, func(tx *sql.Tx) error {
		var err error
		out, released, err = s.updateEndpoint(ctx, tx, e, row, readAt)
		return err
	})
	if err != nil {
		return storage.Endpoint{}, err
	}
	if released {
		// Enabled again, or no longer ordered: what it held is due.
		s.wake.Signal()
	}
	return out, nil
}

// prepareEndpoint fills in what a new endpoint leaves empty and encodes it.
func (s *Store) prepareEndpoint(e storage.Endpoint) (storage.Endpoint, endpointRow, error) {
	if e.ID == "" {
		e.ID = storage.NewID("ep")
	}
	e.CreatedAt = s.now(e.CreatedAt)
	if e.UpdatedAt.IsZero() {
		e.UpdatedAt = e.CreatedAt
	}
	e.UpdatedAt = s.now(e.UpdatedAt)
	e.NormalizeControls()
	row, err := encodeEndpoint(e, s.secrets)
	return e, row, err
}

// encodeEndpoint writes e's columns, its secrets sealed by codec when it
// has a box.
func encodeEndpoint(e storage.Endpoint, codec storage.SecretsCodec) (endpointRow, error) {
	config := e.Config
	if config == nil {
		config = map[string]string{}
	}
	cfg, err := json.Marshal(config)
	if err != nil {
		return endpointRow{}, fmt.Errorf("encode endpoint config: %w", err)
	}
	types, forms := e.EventTypes, e.FormIDs
	if types == nil {
		types = []string{}
	}
	if forms == nil {
		forms = []string{}
	}
	// Secrets' expiry times are normalised like every other time, so what
	// is read back equals what was written.
	secrets := make([]storage.Secret, len(e.Secrets))
	for i, sec := range e.Secrets {
		secrets[i] = storage.NewSecret(sec.Reveal(), normTime(sec.ExpiresAt))
	}
	enc, err := codec.Encode(e.ID, secrets)
	if err != nil {
		return endpointRow{}, fmt.Errorf("encode endpoint secrets: %w", err)
	}
	headers, err := codec.EncodeHeaders(e.ID, e.Headers)
	if err != nil {
		return endpointRow{}, fmt.Errorf("encode endpoint custom headers: %w", err)
	}
	return endpointRow{config: string(cfg), eventTypes: jsonList(types), formIDs: jsonList(forms), secrets: enc,
		retrySchedule: storage.EncodeRetrySchedule(e.RetrySchedule), headers: headers}, nil
}

func normTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := t.UTC().Truncate(time.Microsecond)
	return &n
}

func (s *Store) insertEndpoint(ctx context.Context, tx *sql.Tx, e storage.Endpoint, row endpointRow) (storage.Endpoint, error) {
	return scanEndpoint(tx.QueryRowContext(ctx, `
		INSERT INTO webhook_endpoints (`+endpointColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, NULL, ?)
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, row.config, row.eventTypes, row.formIDs, row.secrets, e.Description,
		nullMicros(e.DisabledAt), micros(e.CreatedAt), micros(e.UpdatedAt), e.DisabledReason,
		e.RateLimit, e.RateBurst, e.MaxInFlight, boolInt(e.Ordered), row.retrySchedule, row.headers), s.secrets)
}

// scanEndpoint reads one endpoint, its secrets opened by codec.
func scanEndpoint(r rowScanner, codec storage.SecretsCodec) (storage.Endpoint, error) {
	var (
		e                 storage.Endpoint
		row               endpointRow
		disabled, failing sql.NullInt64
		deleted           sql.NullInt64
		created, updated  int64
		ordered           int64
	)
	if err := r.Scan(&e.ID, &e.Transport, &e.URL, &row.config, &row.eventTypes, &row.formIDs, &row.secrets,
		&e.Description, &disabled, &created, &updated, &e.DisabledReason, &failing, &e.RateLimit, &e.RateBurst,
		&e.MaxInFlight, &ordered, &row.retrySchedule, &deleted, &row.headers); err != nil {
		return storage.Endpoint{}, err
	}
	e.Ordered = ordered != 0
	e.FailingSince = fromNullMicros(failing)
	schedule, err := storage.DecodeRetrySchedule(row.retrySchedule)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("endpoint %s: %w", e.ID, err)
	}
	e.RetrySchedule = schedule
	if err := json.Unmarshal([]byte(row.config), &e.Config); err != nil {
		return storage.Endpoint{}, fmt.Errorf("decode config of endpoint %s: %w", e.ID, err)
	}
	if err := json.Unmarshal([]byte(row.eventTypes), &e.EventTypes); err != nil {
		return storage.Endpoint{}, fmt.Errorf("decode event types of endpoint %s: %w", e.ID, err)
	}
	if err := json.Unmarshal([]byte(row.formIDs), &e.FormIDs); err != nil {
		return storage.Endpoint{}, fmt.Errorf("decode form ids of endpoint %s: %w", e.ID, err)
	}
	// The codec's errors name the endpoint and never hold a secret.
	secrets, err := codec.Decode(e.ID, row.secrets)
	if err != nil {
		return storage.Endpoint{}, err
	}
	for i, sec := range secrets {
		secrets[i] = storage.NewSecret(sec.Reveal(), normTime(sec.ExpiresAt))
	}
	e.Secrets = secrets
	if e.Headers, err = codec.DecodeHeaders(e.ID, row.headers); err != nil {
		return storage.Endpoint{}, err
	}
	// JSON null (or a hand-edited row) must not hand callers a nil.
	if e.Config == nil {
		e.Config = map[string]string{}
	}
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if e.FormIDs == nil {
		e.FormIDs = []string{}
	}
	e.DisabledAt = fromNullMicros(disabled)
	e.DeletedAt = fromNullMicros(deleted)
	e.CreatedAt = fromMicros(created)
	e.UpdatedAt = fromMicros(updated)
	return e, nil
}

// updateEndpoint is EndpointUpdate's write, in tx: e's fields, on the
// condition that the endpoint is still at readAt when that is set. It
// reports whether holds were let go.
func (s *Store) updateEndpoint(ctx context.Context, tx *sql.Tx, e storage.Endpoint, row endpointRow, readAt any) (out storage.Endpoint, released bool, err error) {
	before, err := endpointControls(ctx, tx, []string{e.ID})
	if err != nil {
		return out, false, err
	}
	// updated_at is the version the optimistic check compares, so
	// every update moves it forward, even two within one clock tick.
	out, err = scanEndpoint(tx.QueryRowContext(ctx, `
		UPDATE webhook_endpoints
		SET transport = ?, url = ?, config = ?, event_types = ?, form_ids = ?, secrets = ?,
			description = ?, disabled_at = ?, updated_at = max(?, updated_at + 1),
			disabled_reason = ?, rate_limit = ?, rate_burst = ?, max_in_flight = ?, ordered = ?,
			retry_schedule = ?, headers = ?
		WHERE id = ? AND deleted_at IS NULL AND (? IS NULL OR updated_at = ?)
		RETURNING `+endpointColumns,
		e.Transport, e.URL, row.config, row.eventTypes, row.formIDs, row.secrets,
		e.Description, nullMicros(e.DisabledAt), micros(s.now(time.Time{})),
		e.DisabledReason, e.RateLimit, e.RateBurst, e.MaxInFlight, boolInt(e.Ordered), row.retrySchedule,
		row.headers, e.ID, readAt, readAt), s.secrets)
	if err == nil {
		was := before[e.ID]
		after := endpointControl{disabled: out.DisabledAt != nil, ordered: out.Ordered}
		if was.disabled && !after.disabled && out.FailingSince != nil {
			// Enabled again: its failures so far are what it was
			// disabled for, and must not disable it again at once.
			if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ?`, e.ID); err != nil {
				return out, false, err
			}
			out.FailingSince = nil
		}
		if after.disabled != was.disabled || after.ordered != was.ordered {
			released, err = refreshHolds(ctx, tx, e.ID, after)
			return out, released, err
		}
		return out, false, nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		var deleted sql.NullInt64
		switch cerr := tx.QueryRowContext(ctx, `SELECT deleted_at FROM webhook_endpoints WHERE id = ?`, e.ID).Scan(&deleted); {
		case cerr != nil:
		case deleted.Valid:
			return out, false, fmt.Errorf("%w at %s", storage.ErrDeleted, fromMicros(deleted.Int64).Format(time.RFC3339))
		case readAt != nil:
			return out, false, fmt.Errorf("%w: it changed since it was read at %s; read it again and reapply the change",
				storage.ErrConflict, e.UpdatedAt.UTC().Format(time.RFC3339Nano))
		}
	}
	return out, false, err // sql.ErrNoRows becomes ErrNotFound
}

func listEndpoints(ctx context.Context, q querier, codec storage.SecretsCodec) ([]storage.Endpoint, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []storage.Endpoint{}
	for rows.Next() {
		e, err := scanEndpoint(rows, codec)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
