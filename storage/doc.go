// Package storage owns the delivery state machine of Hymical: the Store
// interface every backend implements, the typed states and outcomes, the
// sentinel errors, and the few rules that are the same on every backend
// (endpoint matching, bounding error text, minting ids).
//
// The rules themselves are enforced in SQL by each backend, never by a
// caller holding a row in memory:
//
//   - Claimable means pending and due, or processing with an expired lease.
//     Claiming sets processing, a lease and a fresh random claim token.
//   - Every transition that ends a claim is fenced on the claim token. A
//     caller whose token no longer matches gets ErrClaimLost and changes
//     nothing; it then records its request with AttemptRecordLate, which
//     takes the next lifetime number under a row lock and raises attempts
//     and nothing else.
//   - An attempt is a request that went out. A claim that ends without one
//     (DeliveryRelease, DeliveryFail) writes no attempt and changes neither
//     counter; it may leave a reason on the row (UnsentReason), which the
//     owner's next attempt and replay clear.
//   - attempts only rises and numbers the audit trail; cycle_attempts is what
//     the retry allowance counts, and only DeliveryReplay resets it.
//   - delivered and failed are terminal: only an operator's replay moves them.
//
// This package imports no database driver. storage/postgres and
// storage/sqlite implement Store; storage/storagetest is the one conformance
// suite both must pass.
package storage
