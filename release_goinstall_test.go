package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/hymical/hymical/harness/e2etest"
	"github.com/hymical/hymical/harness/natstest"
	"github.com/hymical/hymical/harness/proctest"
	"github.com/hymical/hymical/harness/redistest"
	"github.com/hymical/hymical/internal/testwait"
	"github.com/hymical/hymical/sdk/webhook"
)

const (
	serverModule = "github.com/hymical/hymical"
	sdkModule    = "github.com/hymical/hymical/sdk"
)

// TestGoInstallAtATag proves the release recipe of docs/packaging.md
// ("Tagging a release") without pushing a tag: the committed tree of HEAD,
// with step 3 applied to a copy, is published with the SDK in a module
// proxy on disk (GOPROXY=file://…), and `go install
// github.com/hymical/hymical@VERSION` from it gives one binary that,
// alone in its directory and with no plugin on the PATH, serves and
// delivers through its built-in http, nats and redis transports to a real
// receiver and real brokers, every message verified with the endpoint's
// secret. The same tree published without step 3 is refused by go install,
// which is why the step exists.
//
// Each run publishes a version of its own and removes it from the module
// cache afterwards: with no go.sum line or checksum database for a made-up
// version, a version used twice would be taken from the cache unchecked,
// so a second run could install the first run's code.
func TestGoInstallAtATag(t *testing.T) {
	needReleaseSwitch(t)
	if testing.Short() {
		t.Skip("builds the server from a module proxy")
	}
	// Most of its time is go install in another process.
	t.Parallel()
	for _, tool := range []string{"git", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev := strings.TrimSpace(string(head))

	// Two made-up tags of the same commit: one as committed, one released
	// by the recipe. The SDK's tag sdk/vX would be version vX of its module.
	n := time.Now().UnixNano()
	asCommitted := fmt.Sprintf("v0.0.1-goinstalltest.%d.replaced", n)
	version := fmt.Sprintf("v0.0.1-goinstalltest.%d", n)
	modcache := goEnv(t, "GOMODCACHE")
	t.Cleanup(func() {
		for _, mod := range []string{serverModule, sdkModule} {
			for _, v := range []string{asCommitted, version} {
				if err := forgetModule(modcache, mod, v); err != nil {
					t.Errorf("removing %s@%s from the module cache: %v", mod, v, err)
				}
			}
		}
	})
	proxy := t.TempDir()
	env := []string{
		"GOPROXY=file://" + filepath.ToSlash(proxy) + "," + goEnv(t, "GOPROXY"),
		// The checksum database knows no made-up version; the first real
		// release needs no such line.
		"GONOSUMDB=" + serverModule,
		"GOWORK=off",
		// So that the cleanup can remove what go unpacked.
		"GOFLAGS=-modcacherw",
	}

	committed := archiveCommit(t, rev)
	publishModule(t, proxy, serverModule, asCommitted, committed)
	bin := t.TempDir()
	install := func(v string) ([]byte, error) {
		// From an empty directory, so no go.mod or go.work is near.
		return runInOwnGroup(t, t.TempDir(), append(env, "GOBIN="+bin), "go", "install", serverModule+"@"+v)
	}
	out, err := install(asCommitted)
	if err == nil || !strings.Contains(string(out), "replace directives") {
		t.Errorf("go install of the tree as committed, with its replace: %v, want a refusal naming the replace directives:\n%s", err, out)
	}

	// Release steps 2 and 3 on a copy: the SDK is published first, then the
	// server requires it and is tidied against it.
	released := archiveCommit(t, rev)
	publishModule(t, proxy, sdkModule, version, filepath.Join(released, "sdk"))
	if out, err := runInOwnGroup(t, released, env, "go", "mod", "edit",
		"-dropreplace="+sdkModule, "-require="+sdkModule+"@"+version); err != nil {
		t.Fatalf("go mod edit: %v\n%s", err, out)
	}
	if out, err := runInOwnGroup(t, released, env, "go", "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy after dropping the replace: %v\n%s", err, out)
	}
	publishModule(t, proxy, serverModule, version, released)
	start := time.Now()
	if out, err := install(version); err != nil {
		t.Fatalf("go install %s@%s: %v\n%s", serverModule, version, err, out)
	}
	t.Logf("go install took %s", time.Since(start).Round(time.Second))

	entries, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "hymical" {
		t.Fatalf("GOBIN holds %v, want the one file hymical", entries)
	}
	hymical := filepath.Join(bin, "hymical")
	t.Cleanup(func() { _, _ = proctest.KillExecutable(hymical) })
	cmdEnv := func(extra ...string) []string {
		// No PATH entry holds a hymical-plugin-*: what delivers is inside
		// hymical.
		return append([]string{"PATH=/usr/bin:/bin", "HOME=" + bin, "TMPDIR=" + os.TempDir()}, extra...)
	}
	v := exec.Command(hymical, "version")
	v.Dir, v.Env = bin, cmdEnv()
	if out, err := v.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "hymical "+version+" ") {
		t.Errorf("the installed hymical version says (%v):\n%s\nwant it to start with hymical %s", err, out, version)
	}

	deliverThroughEachTransport(t, hymical, cmdEnv)
}

// deliverThroughEachTransport runs `hymical serve` from the binary at path
// on SQLite, with a receiver on loopback and a real nats-server and
// redis-server, makes an endpoint of each transport, and checks that every
// submission arrives once through its endpoint's transport, signed with
// that endpoint's secret, and that the server records each as delivered.
func deliverThroughEachTransport(t *testing.T, path string, cmdEnv func(...string) []string) {
	ctx := t.Context()
	natsServer := natstest.Start(t, natstest.Options{})
	redisServer := redistest.Start(t, redistest.Options{})
	nc, err := nats.Connect(natsServer.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "GOINSTALL", Subjects: []string{"goinstall.>"}})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisServer.Addr(), DisableIdentity: true})
	defer rdb.Close()

	// What arrived, by transport, as each message's webhook-id, headers and
	// body; verified once the secrets are known.
	type message struct {
		header http.Header
		body   string
	}
	var mu sync.Mutex
	arrived := map[string][]message{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		arrived["http"] = append(arrived["http"], message{r.Header.Clone(), string(body)})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	// The broker plugins' settings take a list, so they go in a config
	// file, which StartServer keeps apart from the binary, as it does the
	// database.
	srv := e2etest.StartServer(t, e2etest.ServerOptions{
		Hymical: path,
		Config: fmt.Sprintf(`plugins:
  list:
    - name: nats
      settings:
        url: %s
        allowed_networks: 127.0.0.1
    - name: redis
      settings:
        url: %s
        allowed_networks: 127.0.0.1
`, natsServer.URL(), redisServer.URL()),
		Flags: []string{"--webhook.allowed_networks=127.0.0.0/8", "--worker.poll_interval=20ms"},
		Env:   cmdEnv(),
	})
	base := srv.URL
	api := apiCaller(t, srv.Token)

	endpoints := []struct {
		transport string
		body      string
	}{
		{"http", fmt.Sprintf(`{"url":%q,"form_ids":["via-http"]}`, recv.URL+"/hook")},
		{"nats", `{"transport":"nats","config":{"subject":"goinstall.submissions"},"form_ids":["via-nats"]}`},
		{"redis", `{"transport":"redis","config":{"stream":"goinstall:submissions"},"form_ids":["via-redis"]}`},
	}
	const perTransport = 3
	secrets := map[string]string{}     // transport → signing secret
	endpointIDs := map[string]string{} // transport → endpoint id
	sent := map[string][]string{}      // transport → submission data sent
	for _, ep := range endpoints {
		var created struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		}
		api("POST", base+"/v1/endpoints", ep.body, http.StatusCreated, &created)
		if created.Secret == "" {
			t.Fatalf("the %s endpoint was not created", ep.transport)
		}
		secrets[ep.transport], endpointIDs[ep.transport] = created.Secret, created.ID
		for i := range perTransport {
			data := fmt.Sprintf(`{"via":%q,"n":%d}`, ep.transport, i)
			api("POST", base+"/v1/forms/via-"+ep.transport+"/submissions", data, http.StatusAccepted, nil)
			sent[ep.transport] = append(sent[ep.transport], data)
		}
	}

	// Every delivery is recorded delivered, which for the brokers means
	// stored (a JetStream ack, an XADD reply).
	delivered := map[string][]string{} // transport → delivery ids
	testwait.For(t, 60*time.Second, func() error {
		for _, ep := range endpoints {
			var page deliveryPage
			api("GET", base+"/v1/deliveries?limit=500&endpoint_id="+endpointIDs[ep.transport], "", http.StatusOK, &page)
			var ids []string
			for _, d := range page.Deliveries {
				if d.State != "delivered" {
					return fmt.Errorf("%s delivery %s is %s after %d attempts", ep.transport, d.ID, d.State, d.Attempts)
				}
				ids = append(ids, d.ID)
			}
			if len(ids) != perTransport {
				return fmt.Errorf("%d %s deliveries, want %d", len(ids), ep.transport, perTransport)
			}
			delivered[ep.transport] = ids
		}
		return nil
	})

	// Read the brokers as their consumers would.
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Fetch(int(info.State.Msgs), jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		h := http.Header{}
		for _, name := range []string{webhook.HeaderID, webhook.HeaderTimestamp, webhook.HeaderSignature} {
			// NATS headers keep the case they were sent in.
			h.Set(name, m.Headers().Get(name))
		}
		arrived["nats"] = append(arrived["nats"], message{h, string(m.Data())})
	}
	if err := msgs.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		t.Fatal(err)
	}
	xs, err := rdb.XRange(ctx, "goinstall:submissions", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		h := http.Header{}
		for header, field := range map[string]string{webhook.HeaderID: "id", webhook.HeaderTimestamp: "timestamp", webhook.HeaderSignature: "signature"} {
			s, _ := x.Values[field].(string)
			h.Set(header, s)
		}
		body, _ := x.Values["body"].(string)
		arrived["redis"] = append(arrived["redis"], message{h, body})
	}

	mu.Lock()
	defer mu.Unlock()
	for _, ep := range endpoints {
		var ids []string
		matched := map[string]int{}
		for _, m := range arrived[ep.transport] {
			if err := webhook.Verify(m.header, []byte(m.body), secrets[ep.transport]); err != nil {
				t.Errorf("%s: message %s does not verify with its endpoint's secret: %v", ep.transport, m.header.Get(webhook.HeaderID), err)
			}
			ids = append(ids, m.header.Get(webhook.HeaderID))
			for _, data := range sent[ep.transport] {
				if strings.Contains(m.body, data) {
					matched[data]++
				}
			}
		}
		slices.Sort(ids)
		slices.Sort(delivered[ep.transport])
		if !slices.Equal(ids, delivered[ep.transport]) {
			t.Errorf("%s: messages with webhook-ids %q arrived, want one for each delivery %q", ep.transport, ids, delivered[ep.transport])
		}
		for _, data := range sent[ep.transport] {
			if matched[data] != 1 {
				t.Errorf("%s: the submission %s is in %d messages, want 1", ep.transport, data, matched[data])
			}
		}
		t.Logf("%s: %d submissions delivered, %d messages arrived through %s, each verified with the endpoint's secret",
			ep.transport, len(delivered[ep.transport]), len(arrived[ep.transport]), ep.transport)
	}
}

// archiveCommit writes the tree of commit rev to a new directory, as
// `git archive` gives it: committed files only, no .git.
func archiveCommit(t *testing.T, rev string) string {
	t.Helper()
	dir := t.TempDir()
	tarball := filepath.Join(t.TempDir(), "tree.tar")
	if out, err := runInOwnGroup(t, "", nil, "git", "archive", "--format=tar", "-o", tarball, rev); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	if out, err := runInOwnGroup(t, "", nil, "tar", "-xf", tarball, "-C", dir); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	return dir
}

// publishModule adds version of the module in dir to a GOPROXY directory:
// MODULE/@v/list, VERSION.info, VERSION.mod and VERSION.zip, as the file://
// proxy protocol lays them out. The zip leaves out what a real proxy's
// would (nested modules, vendor, VCS directories).
func publishModule(t *testing.T, proxy, path, version, dir string) {
	t.Helper()
	escPath, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(proxy, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	zf, err := os.Create(filepath.Join(at, escVersion+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: path, Version: version}, dir); err != nil {
		t.Fatalf("zipping %s@%s: %v", path, version, err)
	}
	if err := zf.Close(); err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	list, err := os.OpenFile(filepath.Join(at, "list"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintln(list, version)
	if cerr := list.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(at, escVersion+".mod"), gomod, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(at, escVersion+".info"), info, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// forgetModule removes version of the module at path from the module cache
// at modcache: the unpacked tree, the downloaded files and its line in the
// cached version list.
func forgetModule(modcache, path, version string) error {
	escPath, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	errs := []error{os.RemoveAll(filepath.Join(modcache, filepath.FromSlash(escPath)+"@"+escVersion))}
	at := filepath.Join(modcache, "cache", "download", filepath.FromSlash(escPath), "@v")
	files, err := filepath.Glob(filepath.Join(at, escVersion+".*"))
	errs = append(errs, err)
	for _, f := range files {
		errs = append(errs, os.Remove(f))
	}
	list := filepath.Join(at, "list")
	b, err := os.ReadFile(list)
	if errors.Is(err, fs.ErrNotExist) {
		return errors.Join(errs...)
	}
	errs = append(errs, err)
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if line != "" && line != version {
			keep = append(keep, line)
		}
	}
	if len(keep) > 0 {
		errs = append(errs, os.WriteFile(list, []byte(strings.Join(keep, "\n")+"\n"), 0o644))
	} else {
		errs = append(errs, os.Remove(list))
	}
	return errors.Join(errs...)
}

// goEnv is one of go env's values.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}
