package broker

import (
	"log/slog"
	"time"
)

// Loop is the life of one broker connection: a goroutine that dials it on
// first use, dials again after a loss with a growing wait, and stops on
// Close. A transport's connection type embeds it and calls Run in its own
// goroutine. Sends never dial: while the connection is down they fail at
// once, so an outage costs one dial per wait, not one per send.
type Loop struct {
	log  *slog.Logger
	name string
	// ready is closed once the first dial has finished, either way.
	ready chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// NewLoop returns a loop that logs to log and calls its broker name
// ("AMQP", "MQTT") in what it logs. Nothing runs until Run.
func NewLoop(log *slog.Logger, name string) *Loop {
	return &Loop{log: log, name: name, ready: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// Ready is closed once Run's first dial has finished, either way.
func (l *Loop) Ready() <-chan struct{} { return l.ready }

// Stopping is closed when Close is called, for a dial to give up waiting.
func (l *Loop) Stopping() <-chan struct{} { return l.stop }

// Close stops Run and waits for it to return. Call it once.
func (l *Loop) Close() {
	close(l.stop)
	<-l.done
}

// Run keeps the connection up until Close. connect dials once, recording
// what it made or why it failed for sends to read; on success it returns
// watch, which watches the live connection until it is lost (true) or
// Close is called (false, once watch has closed the connection). After a
// failed dial Run waits c.ReconnectWait, doubling on each failure up to
// c.ReconnectWaitMax; a dial that succeeds starts the wait over.
func (l *Loop) Run(c Common, connect func() (watch func() bool, err error)) {
	defer close(l.done)
	first := true
	wait := c.ReconnectWait
	for {
		watch, err := connect()
		if first {
			close(l.ready)
			first = false
		}
		if err != nil {
			l.log.Warn("could not connect to the "+l.name+" broker; trying again", "error", err.Error(), "wait", wait)
			select {
			case <-l.stop:
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, c.ReconnectWaitMax)
			continue
		}
		wait = c.ReconnectWait
		l.log.Info("connected to the " + l.name + " broker")
		if !watch() {
			return
		}
	}
}
