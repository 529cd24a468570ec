package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hymical/hymical/migrations"
	"github.com/hymical/hymical/server/api/apiwire"
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

// GET /readyz: the store answers and holds the schema this build knows,
// every transport plugin runs, and the server's own Ready check, if any,
// passes. A transport that is down makes the server not ready: its
// deliveries wait, unsent, until it runs again.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	notReady := func(format string, args ...any) error {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: fmt.Sprintf(format, args...)}
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
	if err := h.transports.Up(ctx); err != nil {
		h.log.Warn("readiness: a transport plugin is not running", "error", err)
		return notReady("%v; its deliveries wait, unsent, until it runs again", err)
	}
	if h.ready != nil {
		if err := h.ready(ctx); err != nil {
			return notReady("%v", err)
		}
	}
	writeJSON(w, http.StatusOK, apiwire.Status{Status: "ready"})
	return nil
}
