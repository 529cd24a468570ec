package e2etest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/syncbuf"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/server/api/apiwire"
)

// BuildHymical builds the hymical command into dir and returns its path.
func BuildHymical(dir string) (string, error) {
	path := filepath.Join(dir, "hymical")
	if out, err := exec.Command("go", "build", "-o", path, "github.com/hymical/hymical").CombinedOutput(); err != nil {
		return "", fmt.Errorf("building hymical: %w\n%s", err, out)
	}
	return path, nil
}

// HymicalBuild builds the hymical command the first time a test asks for
// it and gives every later test of the binary the same file: a package's
// tests build it once, and not at all when none of them runs a server.
type HymicalBuild struct {
	dir  string
	once sync.Once
	path string
	err  error
}

// NewHymicalBuild builds into dir, which must outlive the tests (a
// TestMain's temporary directory).
func NewHymicalBuild(dir string) *HymicalBuild { return &HymicalBuild{dir: dir} }

// Path builds hymical if no test has yet, and fails t if that failed.
func (b *HymicalBuild) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() { b.path, b.err = BuildHymical(b.dir) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// ServerOptions says how to run `hymical serve`.
type ServerOptions struct {
	// Hymical is the hymical executable (BuildHymical, HymicalBuild).
	Hymical string
	// Config, when not empty, is the YAML written to the config file
	// serve is given with --config.
	Config string
	// Flags come after the ones StartServer sets (a SQLite database in
	// the test's directory, a free loopback port), so they may override
	// them: a later flag wins.
	Flags []string
	// Env is added to the little the server gets: PATH and the admin
	// token.
	Env []string
}

// Server is a real `hymical serve` process, on a free loopback port,
// driven over its HTTP API as a user would with curl. Its methods fail
// the test that started it, so call them from that test's goroutine.
type Server struct {
	// URL is where the API listens, http://127.0.0.1:PORT.
	URL string
	// Token is the admin token the server was started with.
	Token string

	t      testing.TB
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// startTimeout is how long serve may take to say where it listens: it
// migrates a new database and starts its plugins first, which on a loaded
// machine takes seconds.
const startTimeout = 60 * time.Second

// listening is the line serve prints once its API accepts requests.
var listening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

// StartServer starts `hymical serve` as o says and waits until it listens.
// The process is killed when the test ends if it still runs, and its
// output is logged if the test failed.
func StartServer(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	s, err := startServer(t, t.TempDir(), o)
	if s != nil {
		t.Cleanup(func() {
			s.kill()
			if t.Failed() {
				t.Logf("hymical serve output:\n%s", s.Output())
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startServer is StartServer returning its error, so a test can see how
// a server that does not start is reported. A Server is returned whenever
// a process was started, for the caller to kill.
func startServer(t testing.TB, dir string, o ServerOptions) (*Server, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	args := []string{"serve"}
	if o.Config != "" {
		config := filepath.Join(dir, "hymical.yaml")
		if err := os.WriteFile(config, []byte(o.Config), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--config", config)
	}
	args = append(args,
		"--database.url=sqlite:"+filepath.Join(dir, "hymical.db"),
		"--server.listen=127.0.0.1:0",
	)
	args = append(args, o.Flags...)
	cmd := exec.Command(o.Hymical, args...)
	// Not the test's environment: a FORMS_* variable of the machine must
	// not change the server under test.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "FORMS_SERVER_ADMIN_TOKEN=" + token}, o.Env...)
	s := &Server{Token: token, t: t, cmd: cmd, out: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Hymical, err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(startTimeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		if m := listening.FindStringSubmatch(s.Output()); m != nil {
			s.URL = m[1]
			return s, nil
		}
		select {
		case <-s.exited:
			return s, fmt.Errorf("hymical serve stopped before it listened (%v):\n%s", s.err, s.Output())
		default:
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("hymical serve did not say where it listens within %s:\n%s", startTimeout, s.Output())
		}
		time.Sleep(pause)
	}
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "test-admin-token-" + hex.EncodeToString(b), nil
}

// Output is what the server has written to stdout and stderr so far.
func (s *Server) Output() string { return s.out.String() }

// kill ends the process if it still runs and waits for it.
func (s *Server) kill() {
	select {
	case <-s.exited:
	default:
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Stop asks the server to stop with SIGTERM, as a service manager does,
// and returns how it exited: nil for a clean stop.
func (s *Server) Stop(timeout time.Duration) error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.exited:
		return s.err
	case <-time.After(timeout):
		return fmt.Errorf("hymical serve still runs %s after SIGTERM", timeout)
	}
}

// Call sends one API request with the admin token and, for a 2xx answer
// and a non-nil into, decodes its JSON body into into. It returns the
// status and the body.
func (s *Server) Call(method, path, body string, into any) (int, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	if into != nil && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, into); err != nil {
			s.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// CreateEndpoint posts body (an apiwire.EndpointCreate as JSON) to
// /v1/endpoints and returns the endpoint with its secret, shown this once.
func (s *Server) CreateEndpoint(body string) apiwire.EndpointCreated {
	s.t.Helper()
	var created apiwire.EndpointCreated
	if status, b := s.Call(http.MethodPost, "/v1/endpoints", body, &created); status != http.StatusCreated || created.Secret == "" {
		s.t.Fatalf("creating the endpoint %s: %d %s; want 201 with a secret", body, status, b)
	}
	return created
}

// Submit posts data, a JSON object, as a submission of form, and returns
// what the server answered. Each endpoint of the form makes a delivery.
func (s *Server) Submit(form, data string) apiwire.IngestResult {
	s.t.Helper()
	var res apiwire.IngestResult
	if status, b := s.Call(http.MethodPost, "/v1/forms/"+form+"/submissions", data, &res); status != http.StatusAccepted {
		s.t.Fatalf("submitting to %s: %d %s; want 202", form, status, b)
	}
	return res
}

// Delivery is GET /v1/deliveries/{id}.
func (s *Server) Delivery(id string) apiwire.DeliveryDetail {
	s.t.Helper()
	var d apiwire.DeliveryDetail
	if status, b := s.Call(http.MethodGet, "/v1/deliveries/"+id, "", &d); status != http.StatusOK {
		s.t.Fatalf("GET /v1/deliveries/%s: %d %s", id, status, b)
	}
	return d
}

// DeliveryWait is how long WaitDelivery waits: long enough for a retry on
// a short schedule behind a hundred deliveries on a loaded machine.
const DeliveryWait = 60 * time.Second

// WaitDelivery polls the delivery id until done holds of it, and returns
// it then; what says what done waits for, for the failure message.
func (s *Server) WaitDelivery(id, what string, done func(apiwire.DeliveryDetail) bool) apiwire.DeliveryDetail {
	s.t.Helper()
	var d apiwire.DeliveryDetail
	testwait.For(s.t, DeliveryWait, func() error {
		if d = s.Delivery(id); !done(d) {
			return fmt.Errorf("delivery %s is not %s: %s after %d attempts %+v, unsent reason %q", id, what, d.State, d.Attempts, d.AttemptHistory, d.UnsentReason)
		}
		return nil
	})
	return d
}

// Terminal holds of a delivery that is delivered or failed: nothing more
// will happen to it unless it is replayed.
func Terminal(d apiwire.DeliveryDetail) bool {
	return d.State == apiwire.StateDelivered || d.State == apiwire.StateFailed
}
