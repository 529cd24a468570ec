// Package pluginhost runs the transport plugins of the Hymical delivery
// server: it finds them, checks their SHA-256 pins, launches them with
// go-plugin over gRPC with mutual TLS, configures them, and moves messages
// to them and outcomes back.
//
// It owns the plugin processes and nothing else. It never sees delivery
// state: a caller hands it a message and a deadline and gets an Outcome,
// and deciding what the outcome means for a delivery is the caller's job.
// It must not import storage or anything that reaches the database, and it
// keeps the server's environment (database DSNs and other secrets) away
// from the plugins it starts: a plugin gets a handful of variables the Go
// runtime needs, and the tracing set-up the caller passes in
// Config.PluginEnv.
//
// Every call carries the caller's trace context to the plugin (W3C
// traceparent, in the send's request on the stream or in a unary call's
// gRPC metadata), with a client span when Config.TracerProvider is set; a
// restart is noted as an event on the caller's span.
//
// Sends go to a plugin over one long-lived gRPC stream per process
// (protocol 2), each request tagged with an id its reply carries back, so
// any number of sends are in flight at once for the cost of one message
// each way. A plugin built against an SDK from before that speaks protocol
// 1, a unary call per send, with the same guarantees.
//
// A plugin that crashes, or does not answer by the deadline plus a grace,
// costs that attempt a retryable outcome; the host kills the process and
// starts a new one, configured again, for the next send. A crash ends the
// stream, and every send waiting on it gets its retryable outcome at once.
// A send that never reached a plugin (the name is unknown, the process is
// not running and cannot be started again, the stream to it had broken
// before the send was queued) is an outcome with NoRequest set, so the
// caller records no attempt for it; Up reports, for readiness, which
// plugins are not running.
//
// A plugin whose Configure hangs past StartTimeout, or whose process dies
// while configuring, is an outage of that transport, not of the server: New
// starts the others and returns, and the host keeps trying to start that
// one in the background, waiting RetryBackoff and then twice as long after
// each failure, up to MaxRetryBackoff. Meanwhile its sends are NoRequest
// outcomes at once and Up names it, as for a plugin that dies at run time.
// A Configure that answers with an error (the plugin refused its settings)
// and a plugin that cannot be found or does not match its pin still fail
// New: those are the operator's configuration, and no retry fixes them.
package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hymical/hymical/sdk/transport"
	"github.com/hymical/hymical/server/telemetry"
)

// Defaults for the Config durations.
const (
	DefaultSendGrace       = 2 * time.Second
	DefaultStartTimeout    = 10 * time.Second
	DefaultValidateTimeout = 10 * time.Second
	// DefaultSendTimeout is the deadline of a Send given none, so a hung
	// plugin is always caught.
	DefaultSendTimeout = 30 * time.Second
	// DefaultRetryBackoff is the first wait before a plugin that hung or
	// crashed while being configured is started again.
	DefaultRetryBackoff = time.Second
	// MaxRetryBackoff caps the doubling waits between those starts, so a
	// plugin that comes right is running again within about a minute
	// plus its start.
	MaxRetryBackoff = time.Minute
)

// Config says which plugins to run.
type Config struct {
	// Dir holds plugin executables named hymical-plugin-<name>; each one is
	// run. Empty means no directory; a directory that does not exist is an
	// error.
	Dir string
	// Plugins configures plugins by name: where one is (when not in Dir),
	// its SHA-256 pin, and its settings.
	Plugins []PluginConfig
	// BuiltIn is the transports the server's own executable serves; each
	// one no executable in Dir is named for runs from it, as a child
	// process like any other plugin. The zero value means none.
	BuiltIn BuiltIn
	// SendGrace is how long past a send's deadline the host waits before
	// it counts the plugin as hung; zero means DefaultSendGrace.
	SendGrace time.Duration
	// StartTimeout bounds starting and configuring one plugin; zero means
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// ValidateTimeout bounds one Validate call, after which the plugin
	// counts as hung; zero means DefaultValidateTimeout.
	ValidateTimeout time.Duration
	// RetryBackoff is the first wait before the host tries again to start
	// a plugin that hung or crashed while being configured; each failure
	// doubles it, up to MaxRetryBackoff. Zero means DefaultRetryBackoff.
	RetryBackoff time.Duration
	// TracerProvider makes a client span for every call to a plugin; nil
	// means none. Either way the trace context of the caller's context
	// crosses to the plugin.
	TracerProvider trace.TracerProvider
	// PluginEnv, when set, is the extra environment each plugin gets,
	// by plugin name: the plugin's own tracing set-up
	// (telemetry.Telemetry.PluginEnv). It is added to the few variables a
	// plugin inherits, never to the server's whole environment.
	PluginEnv func(name string) []string
	// SpanOutput, when set, receives the spans a plugin writes with the
	// console exporter (lines starting with transport.ConsoleSpanPrefix on
	// its standard error), one JSON object a line, instead of the log.
	SpanOutput io.Writer
}

// BuiltIn is the transports an executable carries besides being the
// server (hymical's `hymical plugin NAME`). The host runs one as it runs
// any plugin, a process of its own that speaks go-plugin's handshake, so a
// crash of a built-in transport costs the server no more than that of an
// external one. A configured Path, or an executable of the same name in
// Dir, wins over the built-in: that is how a user runs a newer or patched
// transport without replacing the server. A SHA-256 pin of a built-in is
// the pin of Executable, the file that runs.
type BuiltIn struct {
	// Executable is the file to run, made absolute; empty means none.
	Executable string
	// Names are the transports it serves.
	Names []string
	// Args are the arguments that make Executable serve the transport
	// name, e.g. plugin http.
	Args func(name string) []string
}

// PluginConfig is one configured plugin.
type PluginConfig struct {
	// Name is what endpoints name as their transport, e.g. "http".
	Name string
	// Path is the executable; empty means Dir/hymical-plugin-<Name>, or the
	// built-in transport of that name when Dir has no such executable.
	Path string
	// SHA256, when set, is the hex SHA-256 the executable must have; a
	// plugin that does not match is not run. It must come from a trusted
	// source, such as the release notes of the build that was installed.
	SHA256 string
	// Settings are handed to the plugin's Configure after every launch.
	Settings map[string]string
}

// Errors New, Validate and Send's outcomes are built on; check them with
// errors.Is.
var (
	ErrPluginNotFound   = errors.New("transport plugin not found")
	ErrChecksumMismatch = errors.New("transport plugin does not match its SHA-256 pin")
	ErrUnknownPlugin    = errors.New("no such transport plugin")
	ErrClosed           = errors.New("plugin host is closed")
)

// Host runs the plugins. Its methods are safe for concurrent use; each
// plugin is one long-lived process whose connection carries concurrent
// sends.
type Host struct {
	logger          *slog.Logger
	tracer          trace.TracerProvider
	pluginEnv       func(name string) []string
	spanOut         io.Writer // nil: plugins' console spans are logged as lines
	grace           time.Duration
	startTimeout    time.Duration
	validateTimeout time.Duration
	retryBackoff    time.Duration
	// stopped ends with Close: it cuts short the background starts of
	// plugins that could not be configured, and their waits.
	stopped context.Context
	stop    context.CancelFunc
	// spawn starts the plugin processes.
	spawn *spawner
	// slots is fixed by New; each slot guards its own process.
	slots map[string]*slot
	names []string
}

// slot is one plugin and its current process.
type slot struct {
	spec spec
	mu   sync.Mutex
	// cur is nil while the plugin is down: after a failed restart, or once
	// the host is closed.
	cur      *instance
	restarts int
	closed   bool
	// retrying is set while a background start (supervise) owns bringing
	// the plugin back; down is then why it is not running, and acquire
	// answers with it at once instead of starting the plugin itself.
	retrying bool
	down     error
}

// New launches and configures every plugin cfg names or its Dir holds. A
// plugin whose Configure hangs past StartTimeout or whose process dies
// while configuring is left not running and started again in the
// background (see the package doc); any other failure stops every plugin
// already started and is returned.
func New(ctx context.Context, cfg Config, logger *slog.Logger) (*Host, error) {
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "pluginhost")
	specs, err := discover(cfg, logger)
	if err != nil {
		return nil, err
	}
	h := &Host{
		logger:          logger,
		tracer:          cfg.TracerProvider,
		pluginEnv:       cfg.PluginEnv,
		spanOut:         syncWriter(cfg.SpanOutput),
		grace:           orDefault(cfg.SendGrace, DefaultSendGrace),
		startTimeout:    orDefault(cfg.StartTimeout, DefaultStartTimeout),
		validateTimeout: orDefault(cfg.ValidateTimeout, DefaultValidateTimeout),
		retryBackoff:    orDefault(cfg.RetryBackoff, DefaultRetryBackoff),
		spawn:           newSpawner(),
		slots:           make(map[string]*slot, len(specs)),
	}
	h.stopped, h.stop = context.WithCancel(context.Background())
	for _, sp := range specs {
		s := &slot{spec: sp}
		h.slots[sp.name] = s
		h.names = append(h.names, sp.name)
		inst, err := h.launch(ctx, sp)
		if err != nil && ctx.Err() == nil && outage(err) {
			h.logger.Error("transport plugin could not be configured; the server starts without it and keeps trying to start it",
				"plugin", sp.name, "reason", ShortReason(err), "error", err, "retry_in", h.retryBackoff)
			s.mu.Lock()
			h.superviseLocked(s, err)
			s.mu.Unlock()
			continue
		}
		if err != nil {
			h.Close()
			return nil, err
		}
		s.cur = inst
		if sp.sum == nil {
			logger.Info("transport plugin started without a SHA-256 pin", "plugin", sp.name, "path", sp.path, "built_in", sp.builtIn, "protocol", inst.protocol)
		} else {
			logger.Info("transport plugin started", "plugin", sp.name, "path", sp.path, "built_in", sp.builtIn, "protocol", inst.protocol)
		}
	}
	return h, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Names returns the names of the plugins the host runs, sorted.
func (h *Host) Names() []string { return slices.Clone(h.names) }

// PluginInfo describes one plugin the host runs.
type PluginInfo struct {
	Name string
	// Path is the executable that runs; for a built-in transport, the
	// server's own, run with Args.
	Path string
	Args []string
	// BuiltIn says it is a transport of the server's own executable, not
	// a hymical-plugin-NAME or a configured path.
	BuiltIn bool
	// Pinned says whether the config pins the binary's SHA-256.
	Pinned   bool
	Restarts int
	// Running says whether the plugin's process runs now. It only looks:
	// unlike Up, it starts nothing, so a scrape cannot restart a plugin.
	Running bool
	// Protocol is the version negotiated with the running process; 0
	// when none runs.
	Protocol int
}

// Plugins describes the plugins the host runs, sorted by name.
func (h *Host) Plugins() []PluginInfo {
	out := make([]PluginInfo, 0, len(h.names))
	for _, name := range h.names {
		s := h.slots[name]
		s.mu.Lock()
		running := s.cur != nil && !s.closed && !s.cur.exited()
		protocol := 0
		if running {
			protocol = s.cur.protocol
		}
		s.mu.Unlock()
		out = append(out, PluginInfo{Name: name, Path: s.spec.path, Args: slices.Clone(s.spec.args), BuiltIn: s.spec.builtIn, Pinned: s.spec.sum != nil, Restarts: h.Restarts(name), Running: running, Protocol: protocol})
	}
	return out
}

// Restarts reports how many times the named plugin was started again after
// crashing, hanging or exiting; 0 for a name the host does not run.
func (h *Host) Restarts(name string) int {
	s, ok := h.slots[name]
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

func (h *Host) unknown(name string) error {
	loaded := "none"
	if len(h.names) > 0 {
		loaded = strings.Join(h.names, ", ")
	}
	return fmt.Errorf("%w %q (loaded: %s); use one of those as the endpoint's transport, or install and configure that plugin", ErrUnknownPlugin, name, loaded)
}

// Send hands msg to the named plugin and returns its outcome. The
// attempt's deadline is deadline or ctx's, whichever is earlier (a zero
// deadline and none on ctx mean DefaultSendTimeout from now); the plugin
// sees it as its context's deadline and Message.Deadline. The host waits
// SendGrace past it before counting the plugin as hung, so Send returns at
// the latest then, even when ctx's deadline was earlier.
//
// Send never returns an error to interpret: an unknown plugin is a
// permanent outcome, and a plugin that is down, crashes or hangs is a
// retryable one (the host then kills and restarts it). When ctx is
// canceled the cancellation reaches the plugin, the outcome is retryable,
// and the plugin is left running.
//
// Outcomes of sends that never reached a plugin have NoRequest set: an
// unknown name (permanent), and a plugin that is not running and could not
// be started again, its binary gone or not matching its pin, or the host
// closed (retryable). A crash or hang mid-send is not one of them: the
// message may have gone out.
func (h *Host) Send(ctx context.Context, name string, msg transport.Message, deadline time.Time) transport.Outcome {
	s, ok := h.slots[name]
	if !ok {
		return transport.Refused(h.unknown(name).Error())
	}
	inst, err := h.acquire(ctx, s)
	if err != nil {
		return transport.Deferred(fmt.Sprintf("transport plugin %q is not running: %v", name, err))
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	if deadline.IsZero() {
		deadline = time.Now().Add(DefaultSendTimeout)
	}
	msg.Deadline = deadline

	callCtx, cancel := callContext(ctx, deadline.Add(h.grace))
	defer cancel()

	out, err := inst.rpc.SendRPC(callCtx, msg)
	if err == nil {
		return out
	}
	// The SDK knows when the message never left (the stream to the plugin
	// had broken already): then the plugin cannot have sent anything.
	unsent := errors.Is(err, transport.ErrNotSent)
	if errors.Is(callCtx.Err(), context.Canceled) {
		// The caller gave up (shutdown, most likely); the plugin did
		// nothing wrong.
		out = transport.Retryable(0, fmt.Sprintf("send through transport plugin %q canceled by the caller: %v", name, err))
		out.NoRequest = unsent
		return out
	}
	what := "crashed or lost its connection"
	if errors.Is(err, context.DeadlineExceeded) {
		what = fmt.Sprintf("did not answer within %s after the attempt's deadline", h.grace)
	}
	h.replace(s, inst, fmt.Sprintf("%s: %v", what, err))
	restarted(ctx, name, what)
	out = transport.Retryable(0, fmt.Sprintf("transport plugin %q %s, so it was restarted: %v", name, what, err))
	out.NoRequest = unsent
	return out
}

// callContext is the context of a send that may run until limit. The call
// runs to the limit whatever ctx's deadline says: were ctx's deadline to end
// it, a plugin that hangs would look like a caller that gave up, and never
// be restarted. ctx's values (trace context) and its cancellation still
// apply.
func callContext(ctx context.Context, limit time.Time) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); !ok || !d.Before(limit) {
		// ctx cannot end the call before the limit, except by being
		// canceled: one context does it. This is the worker pool's case,
		// and it saves a second context and a callback per send.
		return context.WithDeadline(ctx, limit)
	}
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), limit)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	return callCtx, func() {
		stop()
		cancel()
	}
}

// callerDeadlineFirst reports whether ctx's own deadline comes before the
// host's limit for the call, so a timeout is the caller's, not a hang.
func callerDeadlineFirst(ctx context.Context, limit time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && d.Before(limit)
}

// Validate asks the named plugin whether it can send to endpoint. A
// refusal wraps transport.ErrRejected and says why; an unknown name wraps
// ErrUnknownPlugin; a plugin that is down, or does not answer within
// ValidateTimeout, wraps transport.ErrUnavailable (and is restarted).
func (h *Host) Validate(ctx context.Context, name string, endpoint transport.Endpoint) error {
	s, ok := h.slots[name]
	if !ok {
		return h.unknown(name)
	}
	inst, err := h.acquire(ctx, s)
	if err != nil {
		return fmt.Errorf("%w: transport plugin %q is not running: %w", transport.ErrUnavailable, name, err)
	}
	limit := time.Now().Add(h.validateTimeout)
	callCtx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	err = inst.rpc.Validate(callCtx, endpoint)
	callerGaveUp := ctx.Err() != nil || (errors.Is(err, context.DeadlineExceeded) && callerDeadlineFirst(ctx, limit))
	if errors.Is(err, transport.ErrUnavailable) && !callerGaveUp {
		h.replace(s, inst, fmt.Sprintf("failed to answer Validate: %v", err))
		restarted(ctx, name, "failed to answer Validate")
	}
	if err != nil {
		return fmt.Errorf("transport plugin %q: %w", name, err)
	}
	return nil
}

// Up starts every plugin whose process is not running (it exited, or could
// not be started again) and returns an error naming each that still is
// not, with why; nil when every plugin runs. A plugin the host is already
// starting again in the background (its Configure hung or crashed) is not
// started here: Up names it at once, with the last start's error. /readyz asks it, so a plugin
// that died while nothing was sent is started again by the probe rather
// than at the next send, and a readiness probe that took the server out of
// rotation cannot keep it out for want of traffic.
//
// The error is a *DownError: its Error names each plugin with the whole
// story (the executable's path, the exec or Configure error), for the log
// and for authenticated surfaces; its Brief only names each plugin with a
// short reason, for an answer anyone may read.
func (h *Host) Up(ctx context.Context) error {
	var down DownError
	for _, name := range h.names {
		if _, err := h.acquire(ctx, h.slots[name]); err != nil {
			down.Down = append(down.Down, Down{Name: name, Err: err})
		}
	}
	if len(down.Down) == 0 {
		return nil
	}
	return &down
}

// DownError is Up's error: the plugins that are not running, with why.
type DownError struct {
	Down []Down
}

// Down is one plugin that is not running and the error that keeps it so.
type Down struct {
	Name string
	Err  error
}

// Error names each plugin that is not running with its error in full,
// which may hold the executable's path and the operating system's words.
func (e *DownError) Error() string {
	parts := make([]string, len(e.Down))
	for i, d := range e.Down {
		parts[i] = fmt.Sprintf("transport plugin %q is not running: %v", d.Name, d.Err)
	}
	return strings.Join(parts, "; ")
}

// Brief names each plugin that is not running with a short reason (see
// ShortReason), and nothing else: no path, no error text.
func (e *DownError) Brief() string {
	parts := make([]string, len(e.Down))
	for i, d := range e.Down {
		parts[i] = fmt.Sprintf("transport plugin %q is not running (%s)", d.Name, ShortReason(d.Err))
	}
	return strings.Join(parts, "; ")
}

// ShortReason says in a few fixed words why a plugin could not be started:
// "checksum mismatch", "executable not found", "not executable",
// "configure timed out", "crashed while configuring", "configure failed",
// "start timed out", "host closed", or "failed to start". It never repeats
// the error's text, which may name paths.
func ShortReason(err error) string {
	var ce configureError
	switch {
	case errors.Is(err, ErrChecksumMismatch):
		return "checksum mismatch"
	case errors.Is(err, ErrClosed):
		return "host closed"
	case errors.As(err, &ce) && errors.Is(err, context.DeadlineExceeded):
		return "configure timed out"
	case errors.As(err, &ce) && errors.Is(err, transport.ErrUnavailable):
		return "crashed while configuring"
	case errors.As(err, &ce):
		return "configure failed"
	case errors.Is(err, fs.ErrNotExist):
		return "executable not found"
	case errors.Is(err, fs.ErrPermission):
		return "not executable"
	case errors.Is(err, context.DeadlineExceeded):
		return "start timed out"
	}
	return "failed to start"
}

// acquire returns the slot's running process, starting a new one when the
// last one exited or could not be started.
func (h *Host) acquire(ctx context.Context, s *slot) (*instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.cur == nil && s.retrying {
		// Starting it is the background start's job; a send or a
		// readiness probe must not wait on a Configure that hangs.
		return nil, s.down
	}
	if s.cur != nil && !s.cur.exited() {
		return s.cur, nil
	}
	if s.cur != nil {
		h.logger.Warn("transport plugin exited; restarting it", "plugin", s.spec.name)
		s.cur.kill(true)
		s.cur = nil
		restarted(ctx, s.spec.name, "exited")
	}
	// The start belongs to the plugin, not to this one call: a send that
	// is about to time out must not leave the plugin half-configured.
	inst, err := h.launch(context.WithoutCancel(ctx), s.spec)
	if err != nil {
		h.logger.Error("transport plugin could not be restarted", "plugin", s.spec.name, "error", err)
		if outage(err) {
			h.superviseLocked(s, err)
		}
		return nil, err
	}
	s.cur = inst
	s.restarts++
	return inst, nil
}

// restarted notes on the caller's span that this call found the plugin
// broken and had it restarted, so the trace of the attempt says why it
// failed and what the host did about it.
func restarted(ctx context.Context, name, why string) {
	trace.SpanFromContext(ctx).AddEvent(telemetry.EventPluginRestarted,
		trace.WithAttributes(telemetry.AttrPlugin.String(name), telemetry.AttrReason.String(why)))
}

// replace kills failed, if it is still the slot's process, and starts a
// new one so the next send finds it ready. Holding the slot's lock while
// doing so makes concurrent sends wait for the new process rather than
// pile onto the broken one.
func (h *Host) replace(s *slot, failed *instance, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != failed {
		return // another send already replaced it
	}
	h.logger.Warn("transport plugin failed; killing and restarting it", "plugin", s.spec.name, "reason", what)
	failed.kill(true)
	s.cur = nil
	if s.closed {
		return
	}
	inst, err := h.launch(context.Background(), s.spec)
	if err != nil {
		// acquire tries again on the next send, or the background start
		// does when Configure hung or crashed.
		h.logger.Error("transport plugin could not be restarted", "plugin", s.spec.name, "error", err)
		if outage(err) {
			h.superviseLocked(s, err)
		}
		return
	}
	s.cur = inst
	s.restarts++
}

// outage reports whether err, from launch, is the plugin hanging or dying
// while being configured: a Configure call that failed rather than one the
// plugin answered with an error.
func outage(err error) bool {
	var ce configureError
	return errors.As(err, &ce) && errors.Is(err, transport.ErrUnavailable)
}

// superviseLocked records why s is not running and, unless one already
// does, starts a background start of it. The caller holds s.mu.
func (h *Host) superviseLocked(s *slot, why error) {
	s.down = why
	if s.retrying || s.closed {
		return
	}
	s.retrying = true
	go h.supervise(s)
}

// supervise starts s's plugin again until it runs or the host is closed,
// waiting retryBackoff before the first try and twice as long after each
// failure, up to MaxRetryBackoff. It starts the plugin without s.mu held,
// so sends and readiness probes get s.down at once meanwhile.
func (h *Host) supervise(s *slot) {
	name := s.spec.name
	wait := h.retryBackoff
	for tries := 1; ; tries++ {
		t := time.NewTimer(wait)
		select {
		case <-h.stopped.Done():
			t.Stop()
			return
		case <-t.C:
		}
		inst, err := h.launch(h.stopped, s.spec)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			// Close ran while this start did: what it started goes too.
			if inst != nil {
				inst.kill(true)
			}
			return
		}
		if err == nil {
			s.cur, s.down, s.retrying = inst, nil, false
			s.restarts++
			s.mu.Unlock()
			h.logger.Info("transport plugin started", "plugin", name, "tries", tries, "protocol", inst.protocol)
			return
		}
		s.down = err
		s.mu.Unlock()
		wait = min(2*wait, MaxRetryBackoff)
		h.logger.Warn("transport plugin still could not be started; trying again", "plugin", name,
			"reason", ShortReason(err), "error", err, "retry_in", wait)
	}
}

// Stopped is how a plugin's process ended when Stop stopped it.
type Stopped struct {
	// Graceful says the process exited by itself once asked to, within
	// go-plugin's grace, rather than being killed.
	Graceful bool
	// Exit is the process's exit error: nil for status 0.
	Exit error
	// Took is how long stopping it took.
	Took time.Duration
}

// Stop stops the named plugin's running process as Close does (asked to
// exit, given go-plugin's grace, then killed) and says how it ended. The
// plugin is not closed: the next call that needs it starts it again. It
// is for checking a plugin (`hymical plugins check`); serve stops plugins
// with Close.
func (h *Host) Stop(name string) (Stopped, error) {
	s, ok := h.slots[name]
	if !ok {
		return Stopped{}, h.unknown(name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Stopped{}, ErrClosed
	}
	inst := s.cur
	if inst == nil || inst.exited() {
		return Stopped{}, fmt.Errorf("transport plugin %q is not running, so it cannot be stopped", name)
	}
	s.cur = nil
	start := time.Now()
	inst.kill(false)
	took := time.Since(start)
	if !inst.exited() {
		return Stopped{Took: took}, fmt.Errorf("transport plugin %q still runs %s after it was killed", name, took.Round(time.Millisecond))
	}
	return Stopped{Graceful: !inst.runner.killedRunning.Load(), Exit: inst.runner.waitErr, Took: took}, nil
}

// Close stops every plugin, at once, and returns within KillBound: each is
// asked to exit and given two seconds, then its process group is killed.
// A plugin being started again in the background is cut short (its
// Configure is canceled) and killed by that start once it returns, which
// go-plugin's handshake may delay by up to StartTimeout. Sends after Close
// return retryable outcomes. It is safe to call more than once.
func (h *Host) Close() {
	h.stop()
	var wg sync.WaitGroup
	for _, s := range h.slots {
		wg.Go(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.closed = true
			if s.cur != nil {
				s.cur.kill(false)
				s.cur = nil
			}
		})
	}
	wg.Wait()
	h.spawn.close()
}
