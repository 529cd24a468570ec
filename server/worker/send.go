package worker

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/storage"
)

// process sends one claimed delivery and records what happened. run is
// Run's context, which ends at shutdown; record carries the claim's span
// and outlives shutdown by a lease, so that a request that went out is
// recorded even while the process stops, or the history would under-count.
// claimed is when the claim was made.
func (p *Pool) process(run, record context.Context, c storage.Claim, claimed time.Time, rec *recorder) {
	log := deliveryLog{l: p.log, c: &c}
	ep := c.Endpoint
	defer func() {
		if p.share.done(c.Delivery.EndpointID) {
			select {
			case p.freed <- struct{}{}:
			default:
			}
		}
	}()
	if run.Err() != nil {
		p.release(record, log, c, 0)
		return
	}
	start := p.now()
	deadline := start.Add(p.cfg.SendTimeout)
	if c.Delivery.ClaimExpiresAt != nil && !deadline.Before(*c.Delivery.ClaimExpiresAt) {
		log.Warn("the lease would end before the send deadline; giving the claim back", "lease_ends", c.Delivery.ClaimExpiresAt, "deadline", deadline)
		p.release(record, log, c, 0)
		return
	}

	if !p.share.maySend(c.Delivery.EndpointID) {
		// Claimed while its endpoint was quick, which it no longer is, and
		// the slow endpoints have their share of the senders: back to the
		// queue unsent, for a sender within that share to take later.
		log.Info("its endpoint turned slow while the claim waited; giving it back unsent")
		p.release(record, log, c, 0)
		return
	}
	actx, span := p.startAttempt(record, c, ep, start)
	finish := func(o transport.Outcome) {
		end := p.now()
		rec.record(func() {
			defer span.End()
			p.finish(actx, log, c, ep.Transport, o, start, end, rec.done)
		})
	}
	msg, err := message(c, ep, start)
	msg.Deadline = deadline
	if err != nil {
		// Nothing can be sent until the endpoint is fixed: no request, so
		// no attempt; the delivery fails with why.
		rec.record(func() {
			defer span.End()
			p.unsent(actx, log, c, ep.Transport, unsentUnsignable, "signing failed: "+err.Error(), 0)
		})
		return
	}
	p.metrics.RecordClaimToSend(actx, ep.Transport, start.Sub(claimed))
	// The send runs to its deadline even during shutdown, so a request that
	// is already on the wire gets its answer recorded. The deadline goes to
	// the sender, not onto ctx: the sender enforces it and tells a plugin
	// that hung past it (and must be restarted) from a caller that gave up.
	// actx carries the attempt's span to the plugin and on to the receiver.
	p.share.sending(c.Delivery.EndpointID, start)
	out := p.sender.Send(actx, ep.Transport, msg, deadline)
	if out.Error != "" {
		// A plugin's words are recorded in the history, logged and traced,
		// and may quote the endpoint's URL (Go's *url.Error does) or one of
		// its secrets: whatever the plugin, they are masked first.
		out.Error = redact.TextFor(out.Error, slices.Concat(redact.SecretsOf(ep.URL, ep.Config), headerSecrets(ep.Headers)))
	}
	p.share.sent(c.Delivery.EndpointID, start, p.now().Sub(start), !out.NoRequest)
	if kind, ok := unsentOf(out); ok {
		rec.record(func() {
			defer span.End()
			p.unsent(actx, log, c, ep.Transport, kind, out.Error, out.RetryAfter)
		})
		return
	}
	finish(out)
}

// headerSecrets lists what TextFor must hide of an endpoint's custom
// header values: each value, and each long word of it, since a receiver's
// or a library's error may quote the token of "Bearer <token>" alone.
func headerSecrets(hs []storage.Header) []string {
	var out []string
	for _, h := range hs {
		v := h.Reveal()
		out = append(out, v)
		for _, w := range strings.Fields(v) {
			if len(w) >= 8 && w != v {
				out = append(out, w)
			}
		}
	}
	// Longest first, so a value is hidden whole before a word of it.
	slices.SortFunc(out, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return out
}

// message builds the signed message for one attempt. The secret is used
// here and goes no further: the plugin only gets the headers.
func message(c storage.Claim, ep storage.Endpoint, now time.Time) (transport.Message, error) {
	var secrets []string
	for _, s := range ep.Secrets {
		if s.ActiveAt(now) {
			secrets = append(secrets, s.Reveal())
		}
	}
	if len(secrets) == 0 {
		return transport.Message{}, errors.New("the endpoint has no active signing secret; rotate in a new one")
	}
	h, err := webhook.SignHeaders(c.Delivery.ID, now, c.Event.Payload, secrets...)
	if err != nil {
		return transport.Message{}, err
	}
	headers := make([]transport.Header, 0, len(h))
	for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
		headers = append(headers, transport.Header{Name: name, Value: h.Get(name)})
	}
	// The endpoint's own headers go after the signature. The API refuses
	// reserved names (server/endpoint), but a row written another way must
	// still not add a second webhook-signature beside the server's: a
	// webhook-* header is left out rather than sent. (The worker may not
	// import server/endpoint, whose list of reserved names the API
	// enforces; the signature is what must never be overridden.)
	for _, ch := range ep.Headers {
		if !strings.HasPrefix(strings.ToLower(ch.Name), "webhook-") {
			headers = append(headers, transport.Header{Name: ch.Name, Value: ch.Reveal()})
		}
	}
	return transport.Message{
		DeliveryID: c.Delivery.ID,
		Attempt:    c.Delivery.Attempts + 1,
		Endpoint:   transport.Endpoint{URL: ep.URL, Config: ep.Config},
		Headers:    headers,
		Body:       c.Event.Payload,
	}, nil
}
