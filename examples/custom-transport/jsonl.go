package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hymical/hymical/sdk/transport"
)

// The plugin-wide setting and the endpoint config key this transport reads.
const (
	// SettingRoot, when set, is an absolute directory every endpoint's file
	// must lie in. Endpoints are created by users, the plugin's settings by
	// the operator: this is how the operator keeps users from appending to
	// arbitrary files the server's user can write.
	SettingRoot = "root"
	// ConfigPath is the endpoint's file: absolute and clean.
	ConfigPath = "path"
)

// Line is what the transport appends for each message, one JSON object per
// line. Body holds the exact bytes that were signed, as a JSON string, so a
// reader can verify the signature headers over it; a body that is not
// UTF-8 goes into BodyBase64 instead (standard base64, as encoding/json
// writes a []byte).
//
// A crash in the middle of an append can leave a torn last line, and the
// attempt is then retried: a reader skips a line that does not parse, and
// dedupes on the submission id in the body like any receiver.
type Line struct {
	DeliveryID string   `json:"delivery_id"`
	Attempt    int      `json:"attempt"`
	Headers    []Header `json:"headers"`
	Body       *string  `json:"body,omitempty"`
	BodyBase64 []byte   `json:"body_base64,omitempty"`
}

// Header is one header the message carries, in order.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// JSONL is a transport that appends each message to a file as a JSON line.
// It is safe for concurrent use: appends are serialised in the process, and
// each one is synced to disk before it counts as delivered.
type JSONL struct {
	log *slog.Logger

	mu   sync.Mutex // guards root; also serialises appends
	root string
}

var _ transport.Transport = (*JSONL)(nil)

// NewJSONL returns the transport, logging to log.
func NewJSONL(log *slog.Logger) *JSONL { return &JSONL{log: log} }

// Configure implements transport.Transport. Settings not given take their
// defaults, so each Configure replaces the last.
func (j *JSONL) Configure(_ context.Context, settings transport.Settings) error {
	root := ""
	for key, value := range settings {
		switch key {
		case SettingRoot:
			if !filepath.IsAbs(value) || filepath.Clean(value) != value {
				return fmt.Errorf("setting %s: %q must be an absolute, clean directory path such as /var/lib/hymical/outbox", SettingRoot, value)
			}
			fi, err := os.Stat(value)
			if err != nil {
				return fmt.Errorf("setting %s: %w; create the directory first", SettingRoot, err)
			}
			if !fi.IsDir() {
				return fmt.Errorf("setting %s: %s is not a directory", SettingRoot, value)
			}
			root = value
		default:
			return fmt.Errorf("unknown setting %q: the jsonl plugin takes only %q", key, SettingRoot)
		}
	}
	j.mu.Lock()
	j.root = root
	j.mu.Unlock()
	return nil
}

// Validate implements transport.Transport: the endpoint must name an
// absolute, clean file path (inside the root, when one is set), and
// nothing else.
func (j *JSONL) Validate(_ context.Context, e transport.Endpoint) error {
	_, err := j.target(e)
	return err
}

func (j *JSONL) target(e transport.Endpoint) (string, error) {
	for _, key := range slices.Sorted(maps.Keys(e.Config)) {
		if key != ConfigPath {
			return "", fmt.Errorf("unknown endpoint config %q: the jsonl plugin takes only %q", key, ConfigPath)
		}
	}
	path := e.Config[ConfigPath]
	switch {
	case path == "":
		return "", fmt.Errorf("endpoint config %q is missing: set it to the absolute path of the file to append to", ConfigPath)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("endpoint config %q is %q, a relative path: give an absolute one, since the plugin's working directory is not yours to rely on", ConfigPath, path)
	case filepath.Clean(path) != path:
		return "", fmt.Errorf("endpoint config %q is %q: write it clean, as %q", ConfigPath, path, filepath.Clean(path))
	}
	j.mu.Lock()
	root := j.root
	j.mu.Unlock()
	if root != "" {
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "", fmt.Errorf("endpoint config %q is %q, outside the directory %s the operator allows", ConfigPath, path, root)
		}
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return "", fmt.Errorf("endpoint config %q is %q, a directory: name a file in it", ConfigPath, path)
	}
	return path, nil
}

// Send implements transport.Transport.
func (j *JSONL) Send(ctx context.Context, msg transport.Message) transport.Outcome {
	path, err := j.target(msg.Endpoint)
	if err != nil {
		// The endpoint can never work as configured: retrying will not help.
		return transport.Permanent(0, err.Error())
	}
	line := Line{DeliveryID: msg.DeliveryID, Attempt: msg.Attempt, Headers: make([]Header, len(msg.Headers))}
	for i, h := range msg.Headers {
		line.Headers[i] = Header{Name: h.Name, Value: h.Value}
	}
	if utf8.Valid(msg.Body) {
		s := string(msg.Body)
		line.Body = &s
	} else {
		line.BodyBase64 = msg.Body
	}
	b, err := json.Marshal(line)
	if err != nil {
		return transport.Permanent(0, "encoding the line: "+err.Error())
	}
	b = append(b, '\n')

	j.mu.Lock()
	defer j.mu.Unlock()
	// Waiting for the lock may have used up the deadline; a late append
	// would be a delivery the host has already given up on.
	if err := ctx.Err(); err != nil {
		return transport.Retryable(0, "the attempt's deadline passed before the file was free: "+err.Error())
	}
	if err := appendSync(path, b); err != nil {
		return transport.Retryable(0, err.Error())
	}
	// Ids and the path only: the headers carry the signature and are never
	// logged.
	j.log.Info("appended message", "delivery_id", msg.DeliveryID, "attempt", msg.Attempt, "path", path)
	return transport.Delivered(0)
}

// appendSync appends b to the file at path, creating it readable by its
// owner only, and syncs it: delivered must mean on disk.
func appendSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening the endpoint's file: %w", err)
	}
	_, werr := f.Write(b)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("appending to %s: %w", path, werr)
	}
	return nil
}

// DecodeBody returns the exact message body a line carries.
func (l Line) DecodeBody() ([]byte, error) {
	switch {
	case l.Body != nil:
		return []byte(*l.Body), nil
	case l.BodyBase64 != nil:
		return l.BodyBase64, nil
	}
	return nil, errors.New("the line carries no body")
}
