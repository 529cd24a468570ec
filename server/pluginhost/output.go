package pluginhost

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/hymical/hymical/sdk/redact"
	"github.com/hymical/hymical/sdk/transport"
)

// MaxOutputLine bounds one line of a plugin's output, on every path it
// takes to the log: what it writes to os.Stderr once serving (go-plugin
// carries that over gRPC), and what reaches the process's own stderr and
// stdout (before serving, the Go runtime's panics, a child process). The
// first MaxOutputLine bytes of a longer line are kept and the rest is
// dropped, with a marker saying how many bytes went; the next line is
// logged as usual. Without a bound a plugin could make the host hold, and
// log, a line as long as it liked; and go-plugin stops reading a plugin's
// stdout for good at the first line over 64 KiB, after which the plugin
// blocks on its next write there.
const MaxOutputLine = 8 << 10

// lineBounder splits what is written to it into lines of at most
// MaxOutputLine bytes and hands each to emit, with how many bytes of it
// were dropped. It holds at most one bounded line: a line is emitted when
// its newline comes, or at flush.
type lineBounder struct {
	emit    func(line []byte, dropped int64)
	buf     []byte
	dropped int64
}

func (b *lineBounder) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		end := bytes.IndexByte(p, '\n')
		part := p
		if end >= 0 {
			part = p[:end]
		}
		keep := min(len(part), MaxOutputLine-len(b.buf))
		b.buf = append(b.buf, part[:keep]...)
		b.dropped += int64(len(part) - keep)
		if end < 0 {
			break
		}
		b.flush()
		p = p[end+1:]
	}
	return n, nil
}

// flush emits the line held, if any: the output ended without its
// newline.
func (b *lineBounder) flush() {
	if len(b.buf) == 0 && b.dropped == 0 {
		return
	}
	b.emit(bytes.TrimRight(b.buf, "\r"), b.dropped)
	b.buf, b.dropped = b.buf[:0], 0
}

// droppedMarker is appended to a line cut to MaxOutputLine.
func droppedMarker(n int64) string {
	return fmt.Sprintf(" … [%d more bytes of this line dropped]", n)
}

// lineLogger logs each line written to it, bounded. It takes what a
// plugin writes to the os.Stderr that go-plugin hands it once serving.
type lineLogger struct {
	mu sync.Mutex
	b  lineBounder
}

// newLineLogger logs each line; a whole span line (see
// transport.ConsoleSpanPrefix) goes to spans instead, when it is set.
func newLineLogger(logger *slog.Logger, spans io.Writer) *lineLogger {
	return &lineLogger{b: lineBounder{emit: func(line []byte, dropped int64) {
		if span, ok := bytes.CutPrefix(line, []byte(transport.ConsoleSpanPrefix)); ok && spans != nil && dropped == 0 {
			if _, err := spans.Write(append(span, '\n')); err != nil {
				logger.Warn("could not write a plugin's span to the span output", "err", err)
			}
			return
		}
		if dropped == 0 {
			if len(line) > 0 {
				// A plugin may print its endpoint's URL: its secrets are hidden.
				logger.Info("plugin output", "line", redact.Text(string(line)))
			}
			return
		}
		logger.Info("plugin output", "line", redact.Text(string(line))+droppedMarker(dropped), "dropped_bytes", dropped)
	}}}
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// boundedPipe reads one of a plugin process's own output pipes as fast as
// the plugin writes, and passes it on to go-plugin, which reads r, with
// every line bounded. It stands between the two so the plugin never
// blocks on a pipe go-plugin stopped reading, and so the host can end
// go-plugin's read when a process it killed left the pipe open (a child
// holding it), which go-plugin would otherwise wait on for ever.
type boundedPipe struct {
	src *os.File
	r   *io.PipeReader
	w   *io.PipeWriter
	// done is closed once the copy has ended and r has reached EOF.
	done      chan struct{}
	closeOnce sync.Once
}

func newBoundedPipe(src *os.File) *boundedPipe {
	r, w := io.Pipe()
	p := &boundedPipe{src: src, r: r, w: w, done: make(chan struct{})}
	go p.copy()
	return p
}

func (p *boundedPipe) copy() {
	defer close(p.done)
	lines := lineBounder{emit: func(line []byte, dropped int64) {
		out := line
		if dropped > 0 {
			out = append(out, droppedMarker(dropped)...)
		}
		// A write fails only once go-plugin's side is closed; what is
		// left is read and dropped so the plugin is never blocked.
		_, _ = p.w.Write(append(out, '\n'))
	}}
	buf := make([]byte, 32<<10)
	for {
		n, err := p.src.Read(buf)
		_, _ = lines.Write(buf[:n])
		if err != nil {
			lines.flush()
			p.w.Close() // go-plugin reads EOF
			p.src.Close()
			return
		}
	}
}

// close ends the copy now, whoever still holds the pipe's write end:
// go-plugin reads EOF. It is safe to call more than once.
func (p *boundedPipe) close() {
	p.closeOnce.Do(func() {
		// Closing src ends a Read in progress (os.Pipe's files are
		// non-blocking, under the runtime's poller); closing w ends a
		// Write go-plugin is not reading.
		p.src.Close()
		p.w.Close()
	})
	<-p.done
}

// lockedWriter serializes writes, so the span lines of several plugins
// never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// syncWriter is w made safe for the plugins' concurrent writes; nil stays nil.
func syncWriter(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	return &lockedWriter{w: w}
}
