// Package endpoint holds the changes made to an endpoint after it is
// created, written once so that the HTTP API, the console and endpoint
// health cannot drift apart on them: the optimistic read-modify-write,
// enabling and disabling, secret rotation with its grace period, and the
// operator's check before a delete; and
// what an endpoint shows of its keys (its signature scheme, its v1a public
// keys). It changes endpoints only through the store's optimistic update
// and its delete, and never touches deliveries itself.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

// Allow decides, from the endpoint as read for a change, whether the
// caller may make it: its error is returned as it is, and nothing is
// written. It is asked inside the optimistic read-modify-write, so the
// endpoint changed is the endpoint decided on: a scoped caller cannot
// change an endpoint an admin moved out of its scope between a first
// check and the write. A nil Allow allows everything.
type Allow func(storage.Endpoint) error

// check is allow(e), or nil for a nil allow.
func (allow Allow) check(e storage.Endpoint) error {
	if allow == nil {
		return nil
	}
	return allow(e)
}

// Store is what the endpoint changes need of a store.
type Store interface {
	EndpointGet(ctx context.Context, id string) (storage.Endpoint, error)
	EndpointUpdate(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error)
}

// Modify reads the endpoint, lets change edit it, and writes it
// back on the condition that nobody changed it in between (the store's
// optimistic check on UpdatedAt, which also holds across server
// processes). On a conflict it reads again and reapplies change, so change
// must depend only on the endpoint it is given. change returns false when
// there is nothing to write; its error is returned as it is. A store error
// is returned wrapped, for errors.Is against the storage sentinels.
func Modify(ctx context.Context, store Store, id string, change func(e *storage.Endpoint) (bool, error)) (storage.Endpoint, error) {
	return modify(ctx, store.EndpointGet, store.EndpointUpdate, id, change)
}

// modify is Modify with the read and the conditional write given: write
// must return storage.ErrConflict when the endpoint changed since it was
// read (its UpdatedAt).
func modify(ctx context.Context, get func(context.Context, string) (storage.Endpoint, error),
	write func(context.Context, storage.Endpoint) (storage.Endpoint, error), id string, change func(e *storage.Endpoint) (bool, error)) (storage.Endpoint, error) {
	// Every conflict means another change won, so contention ends; the cap
	// only stops a pathological loop. A short random pause spreads writers
	// that collided so they do not collide again in step.
	const tries = 64
	for try := 1; ; try++ {
		e, err := get(ctx, id)
		if err != nil {
			return storage.Endpoint{}, fmt.Errorf("read endpoint %s: %w", id, err)
		}
		if e.DeletedAt != nil {
			// Even a change with nothing to write (disabling a disabled
			// endpoint) must not answer as if the endpoint were there.
			return e, fmt.Errorf("endpoint %s: %w at %s", id, storage.ErrDeleted, e.DeletedAt.UTC().Format(time.RFC3339))
		}
		changed, err := change(&e)
		if err != nil || !changed {
			return e, err
		}
		updated, err := write(ctx, e)
		if errors.Is(err, storage.ErrConflict) && try < tries {
			select {
			case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
			case <-ctx.Done():
				return storage.Endpoint{}, ctx.Err()
			}
			continue
		}
		if err != nil {
			return storage.Endpoint{}, fmt.Errorf("update endpoint %s: %w", id, err)
		}
		return updated, nil
	}
}

// SetDisabled disables (for an operator) or enables an endpoint.
// It is idempotent: disabling a disabled endpoint keeps the time it was
// first disabled, and its reason.
func SetDisabled(ctx context.Context, store Store, id string, disable bool, now time.Time, allow Allow) (storage.Endpoint, error) {
	return Modify(ctx, store, id, func(e *storage.Endpoint) (bool, error) {
		if err := allow.check(*e); err != nil {
			return false, err
		}
		if disable {
			if e.DisabledAt != nil {
				return false, nil
			}
			at := now
			e.DisabledAt, e.DisabledReason = &at, storage.DisabledByOperator
			return true, nil
		}
		if e.DisabledAt == nil {
			return false, nil
		}
		e.DisabledAt = nil
		return true, nil
	})
}

// Disable disables an enabled endpoint for reason (one of the
// storage.Disabled* reasons), at now, if still is nil or says so of the
// endpoint as read inside the optimistic update. It reports whether this
// call disabled it: among processes disabling one endpoint at once,
// exactly one does.
func Disable(ctx context.Context, store Store, id string, reason storage.DisabledReason, now time.Time, still func(storage.Endpoint) bool) (storage.Endpoint, bool, error) {
	flipped := false
	e, err := Modify(ctx, store, id, func(e *storage.Endpoint) (bool, error) {
		flipped = e.DisabledAt == nil && (still == nil || still(*e))
		if flipped {
			at := now
			e.DisabledAt, e.DisabledReason = &at, reason
		}
		return flipped, nil
	})
	return e, flipped && err == nil, err
}

// ErrOperatorEndpoint: the endpoint to delete is the one the server tells
// about the endpoints it disables (endpoints.operator_endpoint).
var ErrOperatorEndpoint = errors.New("the endpoint is the configured operator endpoint")

// Deleter is what Delete needs of a store.
type Deleter interface {
	EndpointGet(ctx context.Context, id string) (storage.Endpoint, error)
	EndpointDelete(ctx context.Context, p storage.EndpointDeleteParams) (storage.EndpointDeleteResult, error)
}

// Delete deletes the endpoint id (see storage.Endpoints.EndpointDelete),
// refusing the configured operator endpoint, operatorEndpoint: the
// server would go on addressing its notices to an endpoint that takes
// none, and nobody would hear that an endpoint was disabled. The setting
// must be changed first.
//
// With allow set, the endpoint is read, allow decides on it, and the
// delete applies only if the endpoint is still as read
// (storage.EndpointDeleteParams.UpdatedAt); after a change in between it
// reads and decides again.
func Delete(ctx context.Context, store Deleter, id string, force bool, operatorEndpoint string, allow Allow) (storage.EndpointDeleteResult, error) {
	if operatorEndpoint != "" && id == operatorEndpoint {
		return storage.EndpointDeleteResult{}, fmt.Errorf("endpoint %s: %w", id, ErrOperatorEndpoint)
	}
	if allow == nil {
		return store.EndpointDelete(ctx, storage.EndpointDeleteParams{ID: id, Force: force})
	}
	// Each conflict means another change won; the cap only stops a
	// pathological loop.
	const tries = 64
	for try := 1; ; try++ {
		e, err := store.EndpointGet(ctx, id)
		if err != nil {
			return storage.EndpointDeleteResult{}, fmt.Errorf("read endpoint %s: %w", id, err)
		}
		if err := allow.check(e); err != nil {
			return storage.EndpointDeleteResult{}, err
		}
		res, err := store.EndpointDelete(ctx, storage.EndpointDeleteParams{ID: id, Force: force, UpdatedAt: e.UpdatedAt})
		if errors.Is(err, storage.ErrConflict) && try < tries {
			continue
		}
		return res, err
	}
}

// CurrentSecret is the secret that signs from now on: the one without an
// expiry (rotation puts it first), or the first if all expire.
func CurrentSecret(e storage.Endpoint) storage.Secret {
	if len(e.Secrets) == 0 {
		return storage.Secret{}
	}
	for _, s := range e.Secrets {
		if s.ExpiresAt == nil {
			return s
		}
	}
	return e.Secrets[0]
}

// MaxLiveSecrets is the most signing secrets an endpoint has active at
// once, the current one included. Each active secret adds one v1,<base64>
// (or v1a,…) entry to the webhook-signature header, and receivers written
// to Standard Webhooks and Svix expect a handful: unbounded, 1,000
// rotations within the grace made a 50 KB header that a default Node
// receiver refused with 431. Rotation keeps to it (see RotateSecret);
// the other writes of an endpoint either make one secret (creation) or
// keep the secrets as read (every other change, through Modify).
const MaxLiveSecrets = 5

// Rotation is the result of a secret rotation.
type Rotation struct {
	Endpoint storage.Endpoint
	// Secret is the new signing secret, to be shown once and never again.
	Secret string
	// PreviousSecretsExpireAt is when the secrets that were active before
	// and are kept stop signing; nil when none was kept.
	PreviousSecretsExpireAt *time.Time
	// Repeat is true when RotateSecret's key was used before: nothing
	// was rotated, and this is the first rotation's answer.
	Repeat bool
	// Retired is how many secrets that were still in their grace this
	// rotation stopped at once, the oldest first, to keep the endpoint
	// within MaxLiveSecrets; 0 on a repeat.
	Retired int
}

// RotateSecret gives the endpoint a new signing secret of the same scheme
// as its current one (a whsk_ key for a v1a endpoint, a whsec_ secret for a
// v1 one), which signs from now on. Every secret that was active keeps
// signing beside it until now + grace (or its own earlier expiry), so
// receivers can switch over without dropping a message; secrets already
// past their expiry are removed.
//
// At most MaxLiveSecrets stay active: the new one and the newest active
// ones before it. A rotation past the cap retires the oldest secrets
// still in their grace at once (Rotation.Retired counts them) rather than
// refusing, so that rotating stays possible whenever it is needed, a
// leaked secret above all. What it costs falls on a receiver still
// verifying only with a secret MaxLiveSecrets-1 rotations old, which must
// take a newer one. The secrets are kept newest first, as every rotation writes
// them, so their order says which is oldest.
//
// With key set, the rotation happens at most once per key
// (storage.Endpoints.EndpointRotate): the key is recorded with the new
// secret's SHA-256, never the secret. A repeat rotates nothing and, with
// Repeat set, returns the secret the first rotation made, found again on
// the endpoint by its fingerprint, as long as it is still the one that
// signs from now on; otherwise ErrSecretReplaced (the endpoint deleted
// since: storage.ErrDeleted).
func RotateSecret(ctx context.Context, store RotateStore, id string, grace time.Duration, now time.Time, key *storage.Idempotency, allow Allow) (Rotation, error) {
	var first *storage.EndpointRotateResult
	rot, err := rotate(ctx, store.EndpointGet, func(ctx context.Context, r Rotation) (storage.Endpoint, error) {
		res, err := store.EndpointRotate(ctx, storage.EndpointRotateParams{
			Endpoint: r.Endpoint, SecretSHA256: storage.SecretFingerprint(storage.NewSecret(r.Secret, nil)),
			// The key is dated by the store's clock, as every other keyed
			// route's is, so one window holds across them.
			PreviousSecretsExpireAt: r.PreviousSecretsExpireAt, Idempotency: key,
		})
		if err == nil && res.Duplicate {
			first = &res
		}
		return res.Endpoint, err
	}, id, grace, now, allow)
	if err != nil || first == nil {
		return rot, err
	}
	r := Rotation{Endpoint: first.Endpoint, PreviousSecretsExpireAt: first.PreviousSecretsExpireAt, Repeat: true}
	for _, s := range first.Endpoint.Secrets {
		if storage.SecretFingerprint(s) != first.SecretSHA256 {
			continue
		}
		if s.ExpiresAt == nil {
			r.Secret = s.Reveal()
			return r, nil
		}
		return Rotation{}, fmt.Errorf("endpoint %s: %w; it signs until %s", id, ErrSecretReplaced, s.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return Rotation{}, fmt.Errorf("endpoint %s: %w, and no longer signs", id, ErrSecretReplaced)
}

// rotate is RotateSecret with the read and the conditional write given,
// as modify takes them; write is handed the rotation about to be written.
func rotate(ctx context.Context, get func(context.Context, string) (storage.Endpoint, error),
	write func(context.Context, Rotation) (storage.Endpoint, error), id string, grace time.Duration, now time.Time, allow Allow) (Rotation, error) {
	// Cut to what every backend stores, so the time shown is the time kept.
	expiry := now.Add(grace).UTC().Truncate(time.Millisecond)
	var (
		kept    bool
		retired int
		secret  string
		minted  webhook.Scheme
	)
	e, err := modify(ctx, get, func(ctx context.Context, e storage.Endpoint) (storage.Endpoint, error) {
		r := Rotation{Endpoint: e, Secret: secret, Retired: retired}
		if kept {
			r.PreviousSecretsExpireAt = &expiry
		}
		return write(ctx, r)
	}, id, func(e *storage.Endpoint) (bool, error) {
		if err := allow.check(*e); err != nil {
			return false, err
		}
		// Reset on every try: a retry after a conflict starts over. The
		// scheme is only known once the endpoint is read.
		kept, retired = false, 0
		scheme := Scheme(*e)
		if secret == "" || scheme != minted {
			var err error
			if secret, err = scheme.NewKey(); err != nil {
				return false, err
			}
			minted = scheme
		}
		next := []storage.Secret{storage.NewSecret(secret, nil)}
		for _, s := range e.Secrets {
			if !s.ActiveAt(now) {
				continue
			}
			if len(next) == MaxLiveSecrets {
				retired++
				continue
			}
			until := expiry
			if s.ExpiresAt != nil && s.ExpiresAt.Before(until) {
				until = *s.ExpiresAt
			}
			next = append(next, storage.NewSecret(s.Reveal(), &until))
			kept = true
		}
		e.Secrets = next
		return true, nil
	})
	if err != nil {
		return Rotation{}, err
	}
	r := Rotation{Endpoint: e, Secret: secret, Retired: retired}
	if kept {
		r.PreviousSecretsExpireAt = &expiry
	}
	return r, nil
}

// RotateStore is what a rotation needs of a store.
type RotateStore interface {
	EndpointGet(ctx context.Context, id string) (storage.Endpoint, error)
	EndpointRotate(ctx context.Context, p storage.EndpointRotateParams) (storage.EndpointRotateResult, error)
}

// ErrSecretReplaced: a repeat of a keyed rotation found that the secret
// it made no longer signs alone: another rotation came after it. The
// secret is not shown again, since a receiver given it would soon fail.
var ErrSecretReplaced = errors.New("the secret this rotation made was replaced by a later rotation")

// Scheme is the signature scheme of an endpoint: that of its current
// secret, the one without an expiry (the first one, which rotation puts in
// front, if all expire). The scheme is chosen when the endpoint is created
// and kept by every rotation; an endpoint without secrets is v1.
func Scheme(e storage.Endpoint) webhook.Scheme {
	if len(e.Secrets) == 0 {
		return webhook.SchemeV1
	}
	return webhook.KeyScheme(CurrentSecret(e).Reveal())
}

// PublicKey is the whpk_ public key of one of an endpoint's v1a secrets,
// which receivers verify with and which may be shown anywhere.
type PublicKey struct {
	Key string
	// ExpiresAt is set for a rotated-out key still signing in its grace.
	ExpiresAt *time.Time
}

// PublicKeys returns the public key of every active v1a secret of e, in the
// order they sign; none for a v1 endpoint, whose secrets have no public half.
// A stored key that does not parse is left out: the worker refuses to sign
// with it and says so in the attempt's error.
func PublicKeys(e storage.Endpoint, now time.Time) []PublicKey {
	var out []PublicKey
	for _, s := range e.Secrets {
		if !s.ActiveAt(now) || webhook.KeyScheme(s.Reveal()) != webhook.SchemeV1a {
			continue
		}
		pk, err := webhook.PublicKey(s.Reveal())
		if err != nil {
			continue
		}
		out = append(out, PublicKey{Key: pk, ExpiresAt: s.ExpiresAt})
	}
	return out
}
