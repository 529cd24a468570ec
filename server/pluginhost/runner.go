package pluginhost

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
)

// How a plugin process is stopped. go-plugin first asks it to exit and
// waits up to gracefulExit (its own fixed two seconds); only then is the
// runner's Kill called, which SIGKILLs the plugin's whole process group,
// so a child the plugin started goes with it (instance.kill calls it too
// when the plugin exited within its grace). A group member that left the
// group (a new session) can still hold the plugin's stdout or stderr
// open; pipeDrain after the kill the host stops reading those pipes
// rather than wait for an EOF that may never come. A plugin being killed
// because it crashed or hung gets no grace: its group is killed at once.
const (
	gracefulExit = 2 * time.Second
	pipeDrain    = time.Second
	// KillBound is the longest stopping one plugin process takes: the
	// grace, the drain, and time for the kernel to reap a killed
	// process. Past it the host stops waiting (a process stuck in the
	// kernel cannot be reaped) and says so in its log.
	KillBound = gracefulExit + pipeDrain + 2*time.Second
)

// procRunner starts and stops one plugin process for go-plugin
// (ClientConfig.RunnerFunc) in place of go-plugin's own runner, which
// waits, on every Kill and before it notices an exit, for the process's
// stdout and stderr to reach EOF: a child of the plugin holding them open
// kept a restart, and the server's shutdown, waiting for ever. This one
// starts the plugin in a process group of its own (and, on Linux, to be
// killed by the kernel should the host die), kills the group, reaps the
// process itself, and hands go-plugin pipes it can end (boundedPipe).
type procRunner struct {
	path string
	args []string
	// env is what the plugin inherits from the host (pluginEnv); go-plugin
	// adds its handshake variables in attach.
	env []string
	// sum is the SHA-256 pin, checked before every start; nil when
	// unpinned.
	sum   []byte
	spawn *spawner

	cmd            *exec.Cmd
	socketDir      string
	stdout, stderr *boundedPipe
	// exited is closed once the process has been reaped; waitErr is then
	// its exit status.
	exited  chan struct{}
	waitErr error
	once    sync.Once
	// killedRunning is set when Kill found the process still running: it
	// did not exit by itself when asked to (see Host.Stop).
	killedRunning atomic.Bool
}

var _ runner.Runner = (*procRunner)(nil)

func newProcRunner(sp spec, env []string, spawn *spawner) *procRunner {
	return &procRunner{path: sp.path, args: sp.args, env: env, sum: sp.sum, spawn: spawn, exited: make(chan struct{})}
}

// attach is the ClientConfig.RunnerFunc: go-plugin passes a command
// carrying the handshake's environment and the directory the plugin's
// socket goes in.
func (r *procRunner) attach(_ hclog.Logger, cmd *exec.Cmd, socketDir string) (runner.Runner, error) {
	r.cmd = exec.Command(r.path, r.args...)
	r.cmd.Env = append(append([]string(nil), r.env...), cmd.Env...)
	// No stdin: go-plugin would hand the plugin the server's own.
	r.cmd.Stdin = nil
	r.cmd.SysProcAttr = procAttr()
	r.socketDir = socketDir
	return r, nil
}

func (r *procRunner) Start(context.Context) (err error) {
	defer func() {
		if err != nil {
			// go-plugin removes the socket directory only for a runner
			// that started a process.
			_ = os.RemoveAll(r.socketDir)
		}
	}()
	if r.sum != nil {
		// As go-plugin's SecureConfig does, which cannot be used with a
		// RunnerFunc: the pin comes from the config, never from the file
		// about to run, and the file is hashed just before it is run.
		ok, err := (&plugin.SecureConfig{Checksum: r.sum, Hash: sha256.New()}).Check(r.path)
		if err != nil {
			return fmt.Errorf("error verifying checksum: %w", err)
		}
		if !ok {
			return plugin.ErrChecksumsDoNotMatch
		}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	r.cmd.Stdout, r.cmd.Stderr = outW, errW
	err = r.spawn.start(r.cmd)
	// The plugin has its own copies of the write ends; the host's must go,
	// or the pipes would never reach EOF.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	r.stdout, r.stderr = newBoundedPipe(outR), newBoundedPipe(errR)
	go func() {
		r.waitErr = r.cmd.Wait()
		close(r.exited)
	}()
	return nil
}

// Wait waits for the process to be reaped; go-plugin calls it once both
// pipes reached EOF.
func (r *procRunner) Wait(context.Context) error {
	<-r.exited
	return r.waitErr
}

// hasExited reports whether the process has ended, whatever its pipes
// say.
func (r *procRunner) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the plugin's process group, and pipeDrain later ends
// go-plugin's reads of its pipes if something outside the group still
// holds them. go-plugin calls it once its graceful wait is over.
func (r *procRunner) Kill(context.Context) error {
	if r.cmd == nil || r.cmd.Process == nil {
		return nil
	}
	r.once.Do(func() {
		if !r.hasExited() {
			r.killedRunning.Store(true)
		}
		killGroup(r.cmd.Process)
		time.AfterFunc(pipeDrain, r.closePipes)
	})
	return nil
}

// closePipes ends go-plugin's reads of the process's stdout and stderr.
func (r *procRunner) closePipes() {
	if r.stdout != nil {
		r.stdout.close()
		r.stderr.close()
	}
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout.r }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr.r }
func (r *procRunner) Name() string          { return r.path }

// ID is the process id once started; go-plugin does nothing on Kill for an
// empty one.
func (r *procRunner) ID() string {
	if r.cmd == nil || r.cmd.Process == nil {
		return ""
	}
	return strconv.Itoa(r.cmd.Process.Pid)
}

func (r *procRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("This usually means that %s is not a Hymical transport plugin, was built for another system, or did not finish go-plugin's handshake.", r.path)
}

// The plugin runs on this host: addresses need no translating.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// spawner starts every plugin process of a host from one OS thread that
// lives as long as the host. On Linux a plugin is started to be killed by
// the kernel when its parent dies (Pdeathsig), and the kernel means the
// thread that started it, not the process (go.dev/issue/27505): the Go
// runtime ends a thread when a goroutine locked to it returns, which any
// library may do, and that would kill every plugin started from it. The
// spawner's thread is locked to it and ends only once the host is closed.
type spawner struct {
	mu     sync.Mutex
	closed bool
	reqs   chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan<- error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		runtime.LockOSThread()
		// Unlocked before returning, so the thread itself lives on.
		defer runtime.UnlockOSThread()
		for req := range s.reqs {
			req.err <- req.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, err: errc}
	return <-errc
}

// close ends the spawner's thread; starts after it fail with ErrClosed.
func (s *spawner) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.reqs)
	}
}
