package pluginhost

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/hymical/hymical/sdk/redact"
)

// hclogAdapter lets go-plugin, which logs through hclog, write to the
// product's one logger. go-plugin also replays each plugin's own log lines
// through it, so they arrive structured, under the plugin's name.
type hclogAdapter struct {
	base    *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(l *slog.Logger) *hclogAdapter {
	return &hclogAdapter{base: l}
}

// levelTrace sits below slog's Debug, as hclog's Trace sits below Debug.
const levelTrace = slog.LevelDebug - 4

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	sl := toSlogLevel(level)
	ctx := context.Background()
	if !a.base.Enabled(ctx, sl) {
		return
	}
	// go-plugin's own keys ("plugin" for a path, for one) would collide
	// with the host's, so they go in a group of their own.
	attrs := make([]any, 0, 2+len(a.implied)+len(args))
	if a.name != "" {
		attrs = append(attrs, "logger", a.name)
	}
	attrs = append(attrs, a.implied...)
	attrs = append(attrs, args...)
	// A plugin may log its endpoint's URL: its secrets are hidden before
	// the line reaches the product's log.
	for i, v := range attrs {
		switch v := v.(type) {
		case string:
			attrs[i] = redact.Text(v)
		case error:
			attrs[i] = redact.Text(v.Error())
		}
	}
	a.base.Log(ctx, sl, redact.Text(msg), slog.Group("goplugin", attrs...))
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.base.Enabled(context.Background(), toSlogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any(nil), a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides what is kept.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler keeps; go-plugin uses
// it to skip parsing plugin log lines nobody will see.
func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.base.Handler(), slog.LevelInfo)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}
