// Package webhook signs and verifies Hymical webhook deliveries using the
// Standard Webhooks scheme (https://www.standardwebhooks.com), and gives
// receivers what they need on top: deduplication on the submission id and
// an http.Handler that does verification, deduplication and the response
// codes the sender acts on.
//
// It owns the wire format of a signature (the three header names, the
// "whsec_" secret format and its HMAC-SHA256 ("v1"), the "whsk_" signing key
// and "whpk_" public key formats and their Ed25519 ("v1a"), both over
// msgID + "." + unixSeconds + "." + body, and the rules a receiver applies to
// accept or reject a request) and the receiver-side helpers built on it. The
// core server imports it to sign every attempt; receivers import it to
// verify and dedupe. It must not import server/, storage/, any plugin
// package or any database driver, so that a receiver can depend on it
// without pulling in the delivery server; the SQL deduper speaks
// database/sql and the receiver chooses the driver.
//
// # Signing (the sender)
//
//	h, err := webhook.SignHeaders(deliveryID, time.Now(), body, secret)
//
// A whsk_ signing key (NewKeyPair) signs v1a instead; its whpk_ public key,
// which need not be kept secret, is what the receiver verifies with.
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
// stable across every attempt and every replay of the same delivery. The
// webhook-timestamp header changes on every attempt, and webhook-id differs
// between endpoints, so neither is the key.
//
// A Deduper records processed ids: Process(ctx, id, fn) runs fn unless id
// was processed before, and records id only when fn succeeds, so a failure
// is retried by the sender and processed then. SQLDeduper keeps the ids in
// SQLite or PostgreSQL and does the record and the work in one transaction;
// with ProcessTx the work's own writes share that transaction, and a
// submission has its effect exactly once however often it arrives.
// MemoryDeduper is for tests and single-process receivers that can live with
// forgetting.
//
// # Receiving
//
// Handler puts it together:
//
//	db, _ := sql.Open("sqlite", "receiver.db?_pragma=busy_timeout(10000)&_txlock=immediate")
//	dedupe, _ := webhook.NewSQLDeduper(db, webhook.SQLOptions{Dialect: webhook.DialectSQLite})
//	_ = dedupe.CreateTable(ctx)
//	verifier, _ := webhook.NewVerifier([]string{os.Getenv("HYMICAL_WEBHOOK_SECRET")})
//	h, _ := webhook.NewTxHandler(verifier, dedupe, func(ctx context.Context, tx *sql.Tx, ev webhook.Event) error {
//		_, err := tx.ExecContext(ctx, "INSERT INTO leads (submission_id, data) VALUES (?, ?)", ev.Submission.ID, ev.Submission.Data)
//		return err
//	})
//	http.Handle("POST /webhooks/hymical", h)
//
// It answers 204 when the handler succeeded, 200 for a submission already
// processed, 500 when the handler failed (the sender retries), 401 when
// verification failed, 413 for a body over the limit and 400 for a signed
// body that is not a submission event. Hymical's HTTP transport treats any
// 4xx other than 408 and 429 as permanent, so a receiver holding the wrong
// secret fails the delivery at once; fix the secret and have an operator
// replay it.
package webhook
