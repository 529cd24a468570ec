// Package webhook signs and verifies Hymical webhook deliveries using the
// Standard Webhooks scheme (https://www.standardwebhooks.com).
//
// It owns the wire format of a signature and nothing else: the three header
// names, the "whsec_" secret format, the HMAC-SHA256 over
// msgID + "." + unixSeconds + "." + body, and the rules a receiver applies to
// accept or reject a request. The core server imports it to sign every
// attempt; receivers import it to verify. It must not import server/,
// storage/ or any plugin package, so that a receiver can depend on it
// without pulling in the delivery server.
//
// # Signing (the sender)
//
//	h, err := webhook.SignHeaders(deliveryID, time.Now(), body, secret)
//
// During a secret rotation pass both the new and the old secret; the
// webhook-signature header then carries one signature per secret and a
// receiver holding either one accepts the request.
//
// # Verifying (the receiver)
//
// Verify on the raw request body, exactly the bytes that arrived, before
// parsing it. Parsing and re-encoding JSON changes spacing, key order and
// number formatting, and any such change breaks the signature:
//
//	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err != nil { ... }
//	if err := verifier.Verify(r.Header, body); err != nil {
//		http.Error(w, "invalid webhook signature", http.StatusUnauthorized)
//		return
//	}
//	// only now: json.Unmarshal(body, &event)
//
// A Verifier rejects a timestamp more than its tolerance (five minutes by
// default) in the past or in the future, which limits how long a captured
// request can be replayed by someone else. Errors can be told apart with
// errors.Is (ErrMissingHeader, ErrMalformedTimestamp, ErrTimestampTooOld,
// ErrTimestampTooNew, ErrNoMatchingSignature) and never contain a secret or
// an expected signature, so they are safe to log.
//
// # Deduplicating
//
// Hymical delivers at least once. A worker can die after your server
// answered 200 but before the outcome was recorded, and the delivery is then
// sent again; an operator can also replay a delivery on purpose. A valid
// signature therefore does not mean a request is new.
//
// After verifying, deduplicate on the submission id inside the payload,
// submission.id (for example "sub_48984534f33749c49a88de2d59400dce"). It is
// stable across every attempt and every replay of the same delivery. Record
// the ids you have processed and acknowledge repeats without acting on them
// again. The webhook-timestamp header changes on every attempt, so it is not
// a dedupe key.
package webhook
