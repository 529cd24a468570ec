package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hymical/hymical/storage"
)

// queryRower is a pool or a transaction.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) insertEndpoint(ctx context.Context, q queryRower, e storage.Endpoint) (storage.Endpoint, error) {
	if e.ID == "" {
		e.ID = storage.NewID("ep")
	}
	e = normalizeEndpoint(e)
	sealed, err := s.seal(e)
	if err != nil {
		return storage.Endpoint{}, err
	}
	return scanEndpoint(q.QueryRow(ctx, `
		INSERT INTO webhook_endpoints (id, transport, url, config, event_types, form_ids, secrets,
			description, disabled_at, created_at, updated_at, disabled_reason, rate_limit, rate_burst,
			max_in_flight, ordered, retry_schedule, headers)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,
			coalesce($10::timestamptz, now()), coalesce($11::timestamptz, $10::timestamptz, now()),
			$12, $13, $14, $15, $16, $17, $18)
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, sealed.secrets,
		e.Description, e.DisabledAt, dbNow(e.CreatedAt), dbNow(e.UpdatedAt), e.DisabledReason,
		e.RateLimit, e.RateBurst, e.MaxInFlight, e.Ordered, storage.EncodeRetrySchedule(e.RetrySchedule),
		sealed.headers), s.secrets)
}

// sealedColumns are an endpoint's columns that hold credentials, in their
// column encoding: sealed when the store has a box.
type sealedColumns struct{ secrets, headers string }

func (s *Store) seal(e storage.Endpoint) (sealedColumns, error) {
	secrets, err := s.secrets.Encode(e.ID, e.Secrets)
	if err != nil {
		return sealedColumns{}, fmt.Errorf("encode secrets: %w", err)
	}
	headers, err := s.secrets.EncodeHeaders(e.ID, e.Headers)
	if err != nil {
		return sealedColumns{}, fmt.Errorf("encode custom headers: %w", err)
	}
	return sealedColumns{secrets: secrets, headers: headers}, nil
}

// errKeyTaken rolls back a keyed create that found its key already held.
var errKeyTaken = errors.New("idempotency key taken")

// EndpointCreate inserts the endpoint. With p.Idempotency, the endpoint
// and the key are inserted in one transaction; the key's insert is ON
// CONFLICT, which waits for a concurrent transaction holding the same key
// and then sees its row, so of two creates racing with one key exactly
// one endpoint is made. A key whose window is over is taken over by the
// update arm.
func (s *Store) EndpointCreate(ctx context.Context, p storage.EndpointCreateParams) (storage.EndpointCreateResult, error) {
	const op = "endpoint create"
	if err := p.Validate(); err != nil {
		return storage.EndpointCreateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	key := p.Idempotency
	if key == nil {
		out, err := s.insertEndpoint(ctx, s.pool, p.Endpoint)
		if errors.Is(err, storage.ErrDeleted) {
			return storage.EndpointCreateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
		}
		if err != nil {
			return storage.EndpointCreateResult{}, mapErr(op, err)
		}
		return storage.EndpointCreateResult{Endpoint: out}, nil
	}
	var res storage.EndpointCreateResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out, err := s.insertEndpoint(ctx, tx, p.Endpoint)
		if err != nil {
			return err
		}
		res = storage.EndpointCreateResult{Endpoint: out}
		return claimKey(ctx, tx, key.Key, keyRecord{
			operation: storage.OpEndpointCreate, requestHash: key.RequestHash, endpointID: ptr(out.ID),
		}, p.Now, key.KeyWindow()) // errKeyTaken rolls the endpoint back
	})
	if errors.Is(err, errKeyTaken) {
		return s.keyedEndpoint(ctx, *key)
	}
	if err != nil {
		return storage.EndpointCreateResult{}, mapErr(op, err)
	}
	return res, nil
}

// keyedEndpoint answers a create whose key was taken within its window:
// with the endpoint the key made, or ErrKeyReused.
func (s *Store) keyedEndpoint(ctx context.Context, key storage.Idempotency) (storage.EndpointCreateResult, error) {
	const op = "endpoint create"
	rec, err := s.heldKey(ctx, key.Key, storage.KeyUse{Operation: storage.OpEndpointCreate, RequestHash: key.RequestHash})
	if err != nil {
		return storage.EndpointCreateResult{}, mapErr(op, err)
	}
	id := *rec.endpointID // the schema's check: a create's record has one
	e, err := s.EndpointGet(ctx, id)
	if err != nil {
		return storage.EndpointCreateResult{}, err
	}
	if e.DeletedAt != nil {
		return storage.EndpointCreateResult{}, fmt.Errorf("postgres: %s: %w: the idempotency key created endpoint %s, deleted since", op, storage.ErrDeleted, id)
	}
	return storage.EndpointCreateResult{Endpoint: e, Duplicate: true}, nil
}

// EndpointRotate writes the rotated endpoint as EndpointUpdate does, in
// one transaction that first claims p.Idempotency's key when there is
// one; a key found held answers from its record with the endpoint as it
// is now.
func (s *Store) EndpointRotate(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error) {
	op := "endpoint rotate secret " + p.Endpoint.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	e := normalizeEndpoint(p.Endpoint)
	secrets, err := s.seal(e)
	if err != nil {
		return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var readAt *time.Time
	if !e.UpdatedAt.IsZero() {
		readAt = &e.UpdatedAt
	}
	var (
		out      storage.Endpoint
		released bool
	)
	key := p.Idempotency
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if key != nil {
			if err := claimKey(ctx, tx, key.Key, keyRecord{
				operation: storage.OpEndpointRotateSecret, requestHash: key.RequestHash, endpointID: ptr(e.ID),
				secretSHA256: ptr(p.SecretSHA256), secretsExpireAt: p.PreviousSecretsExpireAt,
			}, p.Now, key.KeyWindow()); err != nil {
				return err
			}
		}
		var err error
		out, released, err = s.updateEndpoint(ctx, tx, e, secrets, readAt)
		return err
	})
	if errors.Is(err, errKeyTaken) {
		rec, err := s.heldKey(ctx, key.Key, storage.KeyUse{Operation: storage.OpEndpointRotateSecret, Target: e.ID, RequestHash: key.RequestHash})
		if err != nil {
			return storage.EndpointRotateResult{}, mapErr(op, err)
		}
		cur, err := s.EndpointGet(ctx, e.ID)
		if err != nil {
			return storage.EndpointRotateResult{}, err
		}
		if cur.DeletedAt != nil {
			return storage.EndpointRotateResult{}, fmt.Errorf("postgres: %s: %w: the idempotency key rotated the secret of endpoint %s, deleted since at %s",
				op, storage.ErrDeleted, e.ID, cur.DeletedAt.UTC().Format(time.RFC3339))
		}
		res := storage.EndpointRotateResult{Endpoint: cur, PreviousSecretsExpireAt: rec.secretsExpireAt, Duplicate: true}
		if rec.secretSHA256 != nil {
			res.SecretSHA256 = *rec.secretSHA256
		}
		return res, nil
	}
	if err := s.updateError(ctx, op, err, e.ID, readAt); err != nil {
		return storage.EndpointRotateResult{}, err
	}
	if released {
		s.notified()
	}
	return storage.EndpointRotateResult{Endpoint: out, SecretSHA256: p.SecretSHA256, PreviousSecretsExpireAt: p.PreviousSecretsExpireAt}, nil
}

// EndpointGet returns the endpoint with this id, or storage.ErrNotFound.
func (s *Store) EndpointGet(ctx context.Context, id string) (storage.Endpoint, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = $1`, id)
	e, err := scanEndpoint(row, s.secrets)
	if err != nil {
		return storage.Endpoint{}, mapErr("endpoint get "+id, err)
	}
	return e, nil
}

// EndpointList returns every endpoint that is not deleted, ordered by id.
func (s *Store) EndpointList(ctx context.Context) ([]storage.Endpoint, error) {
	return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE deleted_at IS NULL ORDER BY id`)
}

// EndpointListPage returns a page of the endpoints that are not deleted,
// newest (highest id) first, starting after the cursor p.Before.
func (s *Store) EndpointListPage(ctx context.Context, p storage.EndpointListParams) ([]storage.Endpoint, error) {
	if p.Forms == nil {
		return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
			WHERE deleted_at IS NULL AND ($1 = '' OR id < $1)
			ORDER BY id DESC LIMIT $2`, p.Before, p.PageSize())
	}
	// In a scope: listed under one of its forms in webhook_endpoint_forms
	// (so an endpoint of every form, which has no rows there, is not), and
	// under none outside it. The triggers keep that table to form_ids.
	return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints AS e
		WHERE e.deleted_at IS NULL AND ($1 = '' OR e.id < $1)
			AND e.id IN (SELECT f.endpoint_id FROM webhook_endpoint_forms AS f WHERE f.form_id = ANY($3::text[]))
			AND NOT EXISTS (SELECT 1 FROM webhook_endpoint_forms AS o
				WHERE o.endpoint_id = e.id AND o.form_id <> ALL($3::text[]))
		ORDER BY e.id DESC LIMIT $2`, p.Before, p.PageSize(), p.Forms)
}

// EndpointLastErrors reads the last error of each failing endpoint of
// ids in one query: per endpoint, its LastErrorWindow newest deliveries
// through the (endpoint_id, id) index, and for each of them its latest
// attempt through the (delivery_id, number) key, so the work is bounded by
// the window, not by the endpoint's history.
func (s *Store) EndpointLastErrors(ctx context.Context, ids []string) (map[string]string, error) {
	const op = "endpoint last errors"
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT ep.id, f.err
		FROM webhook_endpoints AS ep
		CROSS JOIN LATERAL (
			SELECT CASE WHEN d.unsent_reason <> '' THEN d.unsent_reason ELSE a.error END AS err
			FROM (SELECT w.id, w.unsent_reason FROM webhook_deliveries AS w
				WHERE w.endpoint_id = ep.id ORDER BY w.id DESC LIMIT $2) AS d
			LEFT JOIN LATERAL (SELECT b.outcome, b.error FROM webhook_delivery_attempts AS b
				WHERE b.delivery_id = d.id ORDER BY b.number DESC LIMIT 1) AS a ON true
			WHERE d.unsent_reason <> '' OR (a.outcome <> 'delivered' AND a.error <> '')
			ORDER BY d.id DESC LIMIT 1
		) AS f
		WHERE ep.id = ANY($1) AND ep.failing_since IS NOT NULL`, ids, storage.LastErrorWindow)
	if err != nil {
		return nil, mapErr(op, err)
	}
	var id, msg string
	if _, err := pgx.ForEachRow(rows, []any{&id, &msg}, func() error {
		out[id] = msg
		return nil
	}); err != nil {
		return nil, mapErr(op, err)
	}
	return out, nil
}

func (s *Store) endpoints(ctx context.Context, sql string, args ...any) ([]storage.Endpoint, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, mapErr("endpoint list", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Endpoint, error) { return scanEndpoint(r, s.secrets) })
	if err != nil {
		return nil, mapErr("endpoint list", err)
	}
	if out == nil {
		out = []storage.Endpoint{}
	}
	return out, nil
}

// fanOutLockKey names the advisory lock that keeps deliveries from being
// made for an endpoint being deleted, or held by controls about to change.
// Every transaction that can make a delivery pending (a fan-out, a replay)
// holds it shared; a delete or an update holds it exclusive, so it waits
// for those under way and the next ones wait for it, and then see the
// endpoint deleted or its new controls. A lock of one key, not one per
// endpoint, so a fan-out to many endpoints takes one lock, not hundreds
// of the shared lock table's slots; deletes and updates are rare, and
// hold it only for their own short transaction. (Two-key advisory locks
// are a separate space; this one only has to differ from migrateLockKey.)
const fanOutLockKey int64 = 0x68796d6963616d // migrateLockKey + 1

// lockFanOutSQL takes the fan-out lock shared, for the rest of the
// transaction.
const lockFanOutSQL = `SELECT pg_advisory_xact_lock_shared($1)`

// lockFanOut takes the fan-out lock shared, for the rest of tx.
func lockFanOut(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, lockFanOutSQL, fanOutLockKey)
	return err
}

// lockFanOutExclusive takes the fan-out lock exclusive, for the rest of
// tx: a delete's or an update's.
func lockFanOutExclusive(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, fanOutLockKey)
	return err
}

// deleteRetries bounds how often a delete that lost a deadlock runs again.
const deleteRetries = 3

// EndpointDelete soft-deletes the endpoint p.ID. It takes the fan-out lock
// exclusive first (see fanOutLockKey), then the endpoint's pending and
// processing deliveries in id order, as completions do, and the endpoint
// row last, as completions do when they move failing_since. An
// EndpointUpdate of the same endpoint locks the other way round; if the two
// deadlock, PostgreSQL ends one, and a delete that was ended runs again.
func (s *Store) EndpointDelete(ctx context.Context, p storage.EndpointDeleteParams) (storage.EndpointDeleteResult, error) {
	op := "endpoint delete " + p.ID
	if err := p.Validate(); err != nil {
		return storage.EndpointDeleteResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var (
		res storage.EndpointDeleteResult
		err error
	)
	for range deleteRetries {
		res, err = s.endpointDelete(ctx, p)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" { // deadlock_detected
			break
		}
	}
	if err != nil && !errors.Is(err, storage.ErrEndpointBusy) && !errors.Is(err, storage.ErrDeleted) && !errors.Is(err, storage.ErrConflict) {
		return res, mapErr(op, err)
	}
	if err != nil {
		return res, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return res, nil
}

func (s *Store) endpointDelete(ctx context.Context, p storage.EndpointDeleteParams) (storage.EndpointDeleteResult, error) {
	var res storage.EndpointDeleteResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockFanOutExclusive(ctx, tx); err != nil {
			return err
		}
		// Every change to an endpoint takes the fan-out lock exclusive,
		// as this transaction has: the row read here stays as read.
		var deleted *time.Time
		var updated time.Time
		if err := tx.QueryRow(ctx, `SELECT deleted_at, updated_at FROM webhook_endpoints WHERE id = $1`, p.ID).Scan(&deleted, &updated); err != nil {
			return err
		}
		if deleted != nil {
			return fmt.Errorf("%w at %s", storage.ErrDeleted, deleted.UTC().Format(time.RFC3339))
		}
		if !p.UpdatedAt.IsZero() && !updated.Equal(p.UpdatedAt) {
			return fmt.Errorf("%w: it changed since it was read at %s; read it again and decide again",
				storage.ErrConflict, p.UpdatedAt.UTC().Format(time.RFC3339Nano))
		}
		// Locked, a row's state is read again after any transaction that
		// held it (a completion, a claim) has committed.
		rows, err := tx.Query(ctx, `SELECT id, state FROM webhook_deliveries
			WHERE endpoint_id = $1 AND state IN ('pending', 'processing')
			ORDER BY id FOR UPDATE`, p.ID)
		if err != nil {
			return err
		}
		var ids []string
		var id string
		var state storage.DeliveryState
		_, err = pgx.ForEachRow(rows, []any{&id, &state}, func() error {
			ids = append(ids, id)
			if state == storage.StatePending {
				res.Pending++
			} else {
				res.Processing++
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(ids) > 0 && !p.Force {
			return fmt.Errorf("%w: %d pending, %d processing", storage.ErrEndpointBusy, res.Pending, res.Processing)
		}
		// A processing delivery loses its token here, so its worker's
		// completion is fenced out and can only record a late attempt.
		if _, err := tx.Exec(ctx, `
			UPDATE webhook_deliveries
			SET state = 'failed', completed_at = coalesce($2::timestamptz, now()), held = false,
				claim_token = NULL, claim_expires_at = NULL, unsent_reason = $3
			WHERE id = ANY($1::text[])`, ids, dbNow(p.Now), storage.EndpointDeletedReason); err != nil {
			return err
		}
		res.Endpoint, err = scanEndpoint(tx.QueryRow(ctx, `
			UPDATE webhook_endpoints SET deleted_at = coalesce($2::timestamptz, now()), turn_delivery_id = NULL
			WHERE id = $1 RETURNING `+endpointColumns, p.ID, dbNow(p.Now)), s.secrets)
		return err
	})
	return res, err
}

// EndpointUpdate replaces every mutable field of the endpoint e.ID with e's
// and sets updated_at to the database clock. ID, CreatedAt and FailingSince
// are kept, but enabling a disabled endpoint clears FailingSince. When the
// endpoint is disabled, enabled, or its ordering changes, its pending
// deliveries are held or released to match in the same transaction.
func (s *Store) EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
	op := "endpoint update " + e.ID
	if err := e.Validate(); err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	e = normalizeEndpoint(e)
	secrets, err := s.seal(e)
	if err != nil {
		return storage.Endpoint{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var readAt *time.Time
	if !e.UpdatedAt.IsZero() {
		readAt = &e.UpdatedAt
	}
	var out storage.Endpoint
	released := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, released, err = s.updateEndpoint(ctx, tx, e, secrets, readAt)
		return err
	})
	if err := s.updateError(ctx, op, err, e.ID, readAt); err != nil {
		return storage.Endpoint{}, err
	}
	if released {
		s.notified()
	}
	return out, nil
}

// updateEndpoint is EndpointUpdate's write, in tx: e's fields, with its
// secrets encoded, on the condition that the endpoint is still at readAt
// when that is set (else pgx.ErrNoRows). It reports whether holds were let
// go.
func (s *Store) updateEndpoint(ctx context.Context, tx pgx.Tx, e storage.Endpoint, sealed sealedColumns, readAt *time.Time) (storage.Endpoint, bool, error) {
	// Whether a new or replayed delivery is held follows the endpoint's
	// controls, read by the transaction that makes it pending under the
	// fan-out lock, held shared. Held exclusive here, so no such
	// transaction straddles this one: one that read the old controls
	// commits first and its delivery is held or let go below with the
	// rest, and the next ones read the new controls. (A delivery held for
	// a disabled endpoint by a create that committed after the endpoint was
	// enabled would wait for ever.) Updates are operator actions; creates
	// wait for one short transaction.
	if err := lockFanOutExclusive(ctx, tx); err != nil {
		return storage.Endpoint{}, false, err
	}
	if e.Ordered && e.DisabledAt == nil {
		// The update ends by letting an ordered endpoint's next delivery go
		// if none is under way. A completion that has not committed yet
		// still shows its delivery under way, and, having read the endpoint
		// as unordered, let nothing go itself: the next delivery would stay
		// held until the endpoint's next submission. So the update first
		// waits for the completions of the endpoint's deliveries under way
		// (their row locks), after the fan-out lock and before the
		// endpoint's row: the order deletes take them in.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_deliveries
			WHERE state = 'processing' AND endpoint_id = $1 FOR UPDATE`, e.ID); err != nil {
			return storage.Endpoint{}, false, err
		}
	}
	var before control
	var deleted *time.Time
	err := tx.QueryRow(ctx, `SELECT disabled_at IS NOT NULL, ordered, deleted_at FROM webhook_endpoints
		WHERE id = $1 FOR NO KEY UPDATE`, e.ID).Scan(&before.disabled, &before.ordered, &deleted)
	if err != nil {
		return storage.Endpoint{}, false, err
	}
	if deleted != nil {
		return storage.Endpoint{}, false, fmt.Errorf("%w at %s", storage.ErrDeleted, deleted.UTC().Format(time.RFC3339))
	}
	// updated_at is the version the optimistic check compares, so every
	// update moves it forward, even two within one clock tick.
	out, err := scanEndpoint(tx.QueryRow(ctx, `
		UPDATE webhook_endpoints
		SET transport = $2, url = $3, config = $4, event_types = $5, form_ids = $6, secrets = $7,
			description = $8, disabled_at = $9,
			updated_at = greatest(now(), updated_at + interval '1 microsecond'),
			disabled_reason = $11, rate_limit = $12, rate_burst = $13, max_in_flight = $14,
			ordered = $15, retry_schedule = $16, headers = $17
		WHERE id = $1 AND ($10::timestamptz IS NULL OR updated_at = $10)
		RETURNING `+endpointColumns,
		e.ID, e.Transport, e.URL, e.Config, e.EventTypes, e.FormIDs, sealed.secrets,
		e.Description, e.DisabledAt, readAt, e.DisabledReason, e.RateLimit, e.RateBurst,
		e.MaxInFlight, e.Ordered, storage.EncodeRetrySchedule(e.RetrySchedule), sealed.headers), s.secrets)
	if err != nil {
		return storage.Endpoint{}, false, err
	}
	after := control{disabled: out.DisabledAt != nil, ordered: out.Ordered}
	if before.disabled && !after.disabled && out.FailingSince != nil {
		// Enabled again: its failures so far are what it was disabled
		// for, and must not disable it again at once.
		if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1`, e.ID); err != nil {
			return storage.Endpoint{}, false, err
		}
		out.FailingSince = nil
	}
	if after != before {
		released, err := refreshHolds(ctx, tx, e.ID, after, s.wake.id)
		return out, released, err
	}
	return out, false, nil
}

// updateError maps the error of an endpoint update's transaction.
func (s *Store) updateError(ctx context.Context, op string, err error, id string, readAt *time.Time) error {
	if errors.Is(err, pgx.ErrNoRows) && readAt != nil {
		if _, gerr := s.EndpointGet(ctx, id); gerr == nil {
			return fmt.Errorf("postgres: %s: %w: it changed since it was read at %s; read it again and reapply the change",
				op, storage.ErrConflict, readAt.UTC().Format(time.RFC3339Nano))
		}
	}
	if errors.Is(err, storage.ErrDeleted) {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err != nil {
		return mapErr(op, err)
	}
	return nil
}

const endpointColumns = `id, transport, url, config, event_types, form_ids, secrets, description,
	disabled_at, created_at, updated_at, disabled_reason, failing_since, rate_limit, rate_burst,
	max_in_flight, ordered, retry_schedule, deleted_at, headers`

// epEndpointColumns is endpointColumns read through the alias ep, for
// queries that read an endpoint beside other tables.
const epEndpointColumns = `ep.id, ep.transport, ep.url, ep.config, ep.event_types, ep.form_ids,
	ep.secrets, ep.description, ep.disabled_at, ep.created_at, ep.updated_at, ep.disabled_reason,
	ep.failing_since, ep.rate_limit, ep.rate_burst, ep.max_in_flight, ep.ordered, ep.retry_schedule,
	ep.deleted_at, ep.headers`

// endpointScan holds the columns that need converting after the scan.
type endpointScan struct {
	e                               storage.Endpoint
	secrets, retrySchedule, headers string
}

func (s *endpointScan) dest() []any {
	e := &s.e
	return []any{&e.ID, &e.Transport, &e.URL, &e.Config, &e.EventTypes, &e.FormIDs, &s.secrets,
		&e.Description, &e.DisabledAt, &e.CreatedAt, &e.UpdatedAt, &e.DisabledReason, &e.FailingSince,
		&e.RateLimit, &e.RateBurst, &e.MaxInFlight, &e.Ordered, &s.retrySchedule, &e.DeletedAt, &s.headers}
}

// endpoint is the scanned endpoint, its secrets opened by codec.
func (s *endpointScan) endpoint(codec storage.SecretsCodec) (storage.Endpoint, error) {
	e := s.e
	var err error
	// The codec's errors name the endpoint and never carry a secret.
	if e.Secrets, err = codec.Decode(e.ID, s.secrets); err != nil {
		return storage.Endpoint{}, err
	}
	if e.Headers, err = codec.DecodeHeaders(e.ID, s.headers); err != nil {
		return storage.Endpoint{}, err
	}
	if e.RetrySchedule, err = storage.DecodeRetrySchedule(s.retrySchedule); err != nil {
		return storage.Endpoint{}, fmt.Errorf("endpoint %s: %w", e.ID, err)
	}
	return normalizeEndpoint(e), nil
}

func scanEndpoint(row pgx.Row, codec storage.SecretsCodec) (storage.Endpoint, error) {
	var s endpointScan
	if err := row.Scan(s.dest()...); err != nil {
		return storage.Endpoint{}, err
	}
	return s.endpoint(codec)
}

// normalizeEndpoint makes absent collections empty rather than nil, and
// secret expiries UTC, so an endpoint reads back the same however it was
// written.
func normalizeEndpoint(e storage.Endpoint) storage.Endpoint {
	if e.Config == nil {
		e.Config = map[string]string{}
	}
	if e.EventTypes == nil {
		e.EventTypes = []string{}
	}
	if e.FormIDs == nil {
		e.FormIDs = []string{}
	}
	secrets := make([]storage.Secret, len(e.Secrets))
	for i, s := range e.Secrets {
		if s.ExpiresAt != nil {
			t := s.ExpiresAt.UTC()
			s = storage.NewSecret(s.Reveal(), &t)
		}
		secrets[i] = s
	}
	e.Secrets = secrets
	if e.FailingSince != nil {
		t := e.FailingSince.UTC()
		e.FailingSince = &t
	}
	if e.DeletedAt != nil {
		t := e.DeletedAt.UTC()
		e.DeletedAt = &t
	}
	e.NormalizeControls()
	return e
}
