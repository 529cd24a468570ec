package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hymical/hymical/sdk/webhook"
	"github.com/hymical/hymical/server/event"
)

// Rival is the footing for measuring a webhook sender built on something
// other than hymical (harness/riverbench builds one on River) exactly as
// this bench measures hymical's own phases: a fresh PostgreSQL database on
// the same server, the same loopback receiver verifying every signature,
// the same submission body, and the same CPU readings of this process and
// of the database.
type Rival struct {
	base, name, url string
	recv            *receiver
	secrets         []string
	dbPID           int
	meter           *meter
	arrivals        *arrivals
	started         time.Time
}

// RivalUsage is what a rival's measured window cost, read as the bench's
// own phases are: Self is this process (the rival sender and the
// receiver), Plugin the plugin processes it started (a StartPluginHost's
// hymical-plugin-http; zero when there are none), DB the PostgreSQL
// server's postmaster and its children, and Machine every core's busy
// time. Plugin and DB are read from /proc/<pid>/stat at Start and Stop, so
// a process that exits in between is not counted: a plugin the host
// restarted counts from its start, and the one it replaced not at all.
type RivalUsage struct {
	Self, Plugin, DB, Machine time.Duration
	// Wall is from Start to the last message's first arrival.
	Wall time.Duration
	// Arrived counts distinct messages verified, Again the ones that came
	// more than once, and Bad the requests the receiver refused.
	Arrived, Again, Bad int64
}

// NewRival creates a fresh database on the PostgreSQL server of
// databaseURL (the user needs CREATEDB) and starts a receiver with one
// secret for each of endpoints. Close drops the database.
func NewRival(ctx context.Context, databaseURL string, endpoints int) (*Rival, error) {
	if endpoints < 1 {
		return nil, fmt.Errorf("a rival needs at least one endpoint, got %d", endpoints)
	}
	r := &Rival{base: databaseURL}
	for range endpoints {
		s, err := webhook.NewSecret()
		if err != nil {
			return nil, err
		}
		r.secrets = append(r.secrets, s)
	}
	recv, err := startReceiver(nil)
	if err != nil {
		return nil, err
	}
	r.recv = recv
	for i, s := range r.secrets {
		if err := recv.verifyPath(i, s); err != nil {
			recv.close()
			return nil, err
		}
	}
	if r.name, r.url, err = createDatabase(ctx, databaseURL); err != nil {
		recv.close()
		return nil, err
	}
	r.dbPID = listenerPID(postgresPort(databaseURL))
	return r, nil
}

// DatabaseURL is the fresh database's URL.
func (r *Rival) DatabaseURL() string { return r.url }

// Endpoint is where endpoint i's messages go and the secret to sign them
// with.
func (r *Rival) Endpoint(i int) (url, secret string) { return r.recv.url(i), r.secrets[i] }

// Body is a submission's event body as hymical's ingest builds it, the
// same size and shape as the bench sends.
func (r *Rival) Body() ([]byte, error) {
	ev, err := event.Submission("form_bench", formData, time.Now())
	if err != nil {
		return nil, err
	}
	return ev.Payload, nil
}

// Start begins the measured window: expected messages are awaited, and
// the CPU readings taken.
func (r *Rival) Start(expected int) {
	r.recv.reset()
	r.arrivals = r.recv.record(expected)
	r.meter = startMeter(r.dbPID)
	r.started = time.Now()
}

// Arrived counts the distinct messages verified since Start.
func (r *Rival) Arrived() int {
	r.arrivals.mu.Lock()
	defer r.arrivals.mu.Unlock()
	return len(r.arrivals.at)
}

// Stop ends the measured window.
func (r *Rival) Stop() RivalUsage {
	u := r.meter.stop()
	out := RivalUsage{Self: u.Self, Plugin: u.Plugin, DB: u.DB, Machine: u.Machine, Bad: r.recv.bad.Load()}
	r.arrivals.mu.Lock()
	defer r.arrivals.mu.Unlock()
	out.Arrived, out.Again = int64(len(r.arrivals.at)), r.arrivals.again
	for _, at := range r.arrivals.at {
		out.Wall = max(out.Wall, at.Sub(r.started))
	}
	return out
}

// Close stops the receiver and drops the database.
func (r *Rival) Close(ctx context.Context) error {
	r.recv.close()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := dropDatabase(ctx, r.base, r.name); err != nil {
		return fmt.Errorf("rival: %w", err)
	}
	return nil
}
