package api

import (
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/webhook"

	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/server/endpoint"
	"github.com/hymical/hymical/storage"
)

// The JSON the API answers with is declared in apiwire. Each answer is built
// from a storage type by one function here, so what a field means is decided
// in one place, and no answer has a field that could carry a secret value
// except the one-time Secret of apiwire.EndpointCreated.

func viewEndpoint(e storage.Endpoint, now time.Time) apiwire.Endpoint {
	url, masked := redact.URLParts(e.URL)
	v := apiwire.Endpoint{
		// The URL's credentials and secret-named parameters are not shown;
		// URLMasked says which were there.
		ID: e.ID, URL: url, URLMasked: masked, Transport: e.Transport,
		// Config is shown, but a password in a broker URL or a
		// secret-named setting is not.
		EventTypes: nonNil(e.EventTypes), FormIDs: nonNil(e.FormIDs), Config: redact.Map(e.Config),
		Description: e.Description, Disabled: e.DisabledAt != nil, DisabledAt: utcPtr(e.DisabledAt),
		DisabledReason: string(e.DisabledReason), FailingSince: utcPtr(e.FailingSince),
		RateLimit: e.RateLimit, RateBurst: e.RateBurst, MaxInFlight: e.MaxInFlight, Ordered: e.Ordered,
		RetrySchedule: durations(e.RetrySchedule),
		Secrets:       []apiwire.SecretInfo{},
		Headers:       viewHeaders(e.Headers),
		CreatedAt:     e.CreatedAt.UTC(), UpdatedAt: e.UpdatedAt.UTC(),
	}
	if v.Config == nil {
		v.Config = map[string]string{}
	}
	v.SignatureScheme = string(endpoint.Scheme(e))
	for _, s := range e.Secrets {
		if !s.ActiveAt(now) {
			continue
		}
		sv := apiwire.SecretInfo{ExpiresAt: utcPtr(s.ExpiresAt)}
		if webhook.KeyScheme(s.Reveal()) == webhook.SchemeV1a {
			// A key that does not parse shows no public key; the worker
			// names the problem in the attempt's error.
			if pk, err := webhook.PublicKey(s.Reveal()); err == nil {
				sv.PublicKey = pk
				v.PublicKeys = append(v.PublicKeys, pk)
			}
		}
		v.Secrets = append(v.Secrets, sv)
	}
	return v
}

func viewDelivery(d storage.Delivery) apiwire.Delivery {
	// A reason or an error is a plugin's text, which may quote a URL (a
	// third-party plugin's, or one recorded before the worker masked what it
	// records): its secrets are hidden here too.
	return apiwire.Delivery{
		ID: d.ID, EndpointID: d.EndpointID, EventID: d.EventID, State: apiwire.DeliveryState(d.State),
		Attempts: d.Attempts, CycleAttempts: d.CycleAttempts,
		NextAttemptAt:  d.NextAttemptAt.UTC(),
		LeaseExpiresAt: utcPtr(d.ClaimExpiresAt), Held: d.Held, UnsentReason: redact.Text(d.UnsentReason),
		CreatedAt: d.CreatedAt.UTC(), CompletedAt: utcPtr(d.CompletedAt),
	}
}

func viewEvent(ev storage.Event) apiwire.Event {
	return apiwire.Event{ID: ev.ID, Type: ev.Type, FormID: ev.FormID, SubmissionID: ev.SubmissionID, CreatedAt: ev.CreatedAt.UTC()}
}

func viewAttempts(as []storage.Attempt) []apiwire.Attempt {
	out := make([]apiwire.Attempt, 0, len(as))
	for _, a := range as {
		v := apiwire.Attempt{
			Number: a.Number, Outcome: apiwire.Outcome(a.Outcome), Error: redact.Text(a.Error), Late: a.Late,
			StartedAt: a.StartedAt.UTC(), FinishedAt: a.FinishedAt.UTC(), TraceID: a.TraceID,
		}
		if a.HTTPStatus != 0 {
			status := a.HTTPStatus
			v.HTTPStatus = &status
		}
		out = append(out, v)
	}
	return out
}

func viewReplays(rs []storage.Replay) []apiwire.Replay {
	out := make([]apiwire.Replay, 0, len(rs))
	for _, r := range rs {
		out = append(out, apiwire.Replay{Actor: r.Actor, PreviousState: apiwire.DeliveryState(r.PreviousState), ReplayedAt: r.ReplayedAt.UTC()})
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
