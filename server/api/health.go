package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server/api/apiwire"
	"github.com/hymical/hymical/storage"
)

// readyTimeout bounds one readiness check, so a hung database makes the
// probe fail rather than hang.
const readyTimeout = 3 * time.Second

// GET /healthz: the process is up and serving. It checks nothing else, so
// a database outage does not get a healthy process restarted.
func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, apiwire.Status{Status: "ok"})
	return nil
}

// GET /readyz: the store answers, holds the schema this build knows and
// has not run out of space (see StoreHealth), every transport plugin runs,
// and the server's own Ready check, if any, passes. A transport that is
// down makes the server not ready: its deliveries wait, unsent, until it
// runs again.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	notReady := func(format string, args ...any) error {
		return &apiError{Code: apiwire.CodeNotReady, Message: fmt.Sprintf(format, args...)}
	}
	v, err := h.store.SchemaVersion(ctx)
	if err != nil {
		// The driver's words may name hosts and users; the log has them.
		h.log.Warn("readiness: the database did not answer", "error", err)
		return notReady("the database is not reachable")
	}
	latest, err := migrations.Latest()
	if err != nil {
		return err
	}
	switch {
	case v < latest:
		return notReady("the database is at schema version %d and this build needs %d; run `hymical migrate`", v, latest)
	case v > latest:
		return notReady("the database is at schema version %d, newer than this build knows (%d); run the newer build", v, latest)
	}
	if since, full := h.storeHealth.noSpace(h.now()); full {
		return notReady("the database is out of space: a write failed for lack of it at %s and none has succeeded since, so ingest answers 503 "+
			"(what was accepted before is kept and is being delivered); free space on the database's volume or grow the volume",
			since.UTC().Format(time.RFC3339))
	}
	if err := h.transports.Up(ctx); err != nil {
		// The probe answers anyone: it names the plugin and a short
		// reason, while the executable's path and the exec or Configure
		// error, which describe the host, go to the log only.
		h.log.Warn("readiness: a transport plugin is not running", "error", err)
		return notReady("%s; its deliveries wait, unsent, until it runs again (the server log says why)", briefDown(err))
	}
	if h.ready != nil {
		if err := h.ready(ctx); err != nil {
			return notReady("%v", err)
		}
	}
	writeJSON(w, http.StatusOK, apiwire.Status{Status: "ready"})
	return nil
}

// briefDown is what /readyz says of the transports Up found down: the
// error's Brief when it has one (pluginhost's does), never its text.
func briefDown(err error) string {
	var b interface{ Brief() string }
	if errors.As(err, &b) {
		return b.Brief()
	}
	return "a transport plugin is not running"
}

// noSpaceHold is how long /readyz keeps reporting a store out of space
// after the last write that failed for lack of it, when no write has
// succeeded since. A load balancer that takes a server out of rotation on
// its /readyz would otherwise never send it the write that shows space is
// back; after the hold the server takes traffic again, and a write that
// still fails reports it again at once.
const noSpaceHold = time.Minute

// StoreHealth remembers that a write to the store failed for want of space
// (storage.ErrNoSpace) until a later write that needed space succeeds, so
// /readyz can say the store is full instead of ready. The API and the
// worker pool share one: every ingest and every recorded attempt tells it
// how it ended. The zero value knows of no failure; it is safe for
// concurrent use.
type StoreHealth struct {
	mu sync.Mutex
	// since is when the first failure of the current run of them was
	// seen, last the latest; both zero when none is known.
	since, last time.Time
}

// Observe records how a write that adds rows ended: an error wrapping
// storage.ErrNoSpace marks the store full, nil marks it as having room, and
// any other error says nothing about space and changes nothing. A write
// that adds nothing (a claim, an idempotent repeat) is not a sign of room,
// so callers pass only the failures of those.
func (s *StoreHealth) Observe(err error) {
	if err != nil && !errors.Is(err, storage.ErrNoSpace) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.since, s.last = time.Time{}, time.Time{}
		return
	}
	now := time.Now()
	if s.since.IsZero() {
		s.since = now
	}
	s.last = now
}

// noSpace reports whether the store is known to be out of space at now,
// and since when.
func (s *StoreHealth) noSpace(now time.Time) (since time.Time, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() || now.Sub(s.last) >= noSpaceHold {
		return time.Time{}, false
	}
	return s.since, true
}
