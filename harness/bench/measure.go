package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat and /proc/stat.
// Linux reports them in USER_HZ, which is 100 on every architecture Go
// supports, whatever the kernel's own tick rate.
const userHZ = 100

// usage is what one phase cost, measured from outside the code under test.
type usage struct {
	// Self is this process's user+system CPU time: the worker, the store
	// client, the receiver and the load generator (and SQLite itself).
	Self time.Duration
	// Server is the CPU time of the `hymical serve` processes the HTTP
	// mode runs (with SQLite inside it), summed; zero in the other phases,
	// where the server's parts run in Self.
	Server time.Duration
	// Plugin is the CPU time of the plugin processes the server started:
	// this process, or the serve processes in the HTTP mode.
	Plugin time.Duration
	// DB is the CPU time of the PostgreSQL server: the postmaster that
	// listens on the DSN's port and its children. Zero for SQLite, which
	// runs inside Self.
	DB time.Duration
	// Machine is the busy CPU time of the whole machine, every core: the
	// above and anything else running, such as other people's builds.
	Machine time.Duration
	// PeakRSS is this process's peak resident set (VmHWM) during the phase,
	// in bytes; PluginPeakRSS the largest plugin process's; ServerPeakRSS
	// the largest serve process's over its life (each starts fresh for
	// each phase).
	PeakRSS       int64
	PluginPeakRSS int64
	ServerPeakRSS int64
	// Mallocs and AllocBytes are this process's heap allocations.
	Mallocs    uint64
	AllocBytes uint64
}

// meter takes the readings at the start of a phase.
type meter struct {
	// dbPID is the PostgreSQL postmaster, 0 when unknown or SQLite.
	dbPID int
	// serverPIDs are the serve processes of the HTTP mode, the parents of
	// the plugins; none means this process is the server.
	serverPIDs []int
	// others, when set, lists PostgreSQL backends that serve other
	// databases, such as other people's tests on a shared server, so their
	// CPU is not counted as this phase's.
	others  func() map[int]bool
	skip    map[int]bool
	self    time.Duration
	server  map[int]time.Duration
	plugin  map[int]time.Duration
	db      map[int]time.Duration
	machine time.Duration
	mallocs uint64
	bytes   uint64
	// hwmReset says whether the peak RSS could be reset at the start, so
	// PeakRSS is this phase's and not the process's lifetime peak.
	hwmReset bool
}

// startMeter resets the peak RSS and takes the start readings.
func startMeter(dbPID int) *meter {
	return startServerMeter(nil, dbPID, nil)
}

// startServerMeter is startMeter for a server running in the processes
// serverPIDs (none: this one), leaving out the database backends others
// names.
func startServerMeter(serverPIDs []int, dbPID int, others func() map[int]bool) *meter {
	m := &meter{dbPID: dbPID, serverPIDs: serverPIDs, others: others, skip: map[int]bool{}, server: map[int]time.Duration{}}
	// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux 4.0+).
	m.hwmReset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	if others != nil {
		maps.Copy(m.skip, others())
	}
	m.self = selfCPU()
	for _, pid := range serverPIDs {
		_, _, m.server[pid], _ = procStat(pid)
	}
	m.plugin, m.db = processCPU(m.parents(), dbPID)
	// The server and its plugins are reset too: without it their peak is
	// the lifetime one, and an idle phase after a warm-up reports the
	// burst's resident set rather than the idle server's.
	for _, pid := range m.serverPIDs {
		m.hwmReset = resetPeakRSS(pid) && m.hwmReset
	}
	for pid := range m.plugin {
		m.hwmReset = resetPeakRSS(pid) && m.hwmReset
	}
	m.machine = machineBusy()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.mallocs, m.bytes = ms.Mallocs, ms.TotalAlloc
	return m
}

// stop takes the end readings.
func (m *meter) stop() usage {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	u := usage{
		Self:       selfCPU() - m.self,
		Machine:    machineBusy() - m.machine,
		PeakRSS:    statusBytes("/proc/self/status", "VmHWM:"),
		Mallocs:    ms.Mallocs - m.mallocs,
		AllocBytes: ms.TotalAlloc - m.bytes,
	}
	for _, pid := range m.serverPIDs {
		_, _, cpu, _ := procStat(pid)
		u.Server += cpu - m.server[pid]
		u.ServerPeakRSS = max(u.ServerPeakRSS, statusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:"))
	}
	plugin, db := processCPU(m.parents(), m.dbPID)
	if m.others != nil {
		maps.Copy(m.skip, m.others())
	}
	for pid, cpu := range plugin {
		u.Plugin += cpu - m.plugin[pid]
		u.PluginPeakRSS = max(u.PluginPeakRSS, statusBytes(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:"))
	}
	// A backend that started during the phase counts whole; one that
	// exited during it is lost, which only ever under-counts.
	for pid, cpu := range db {
		if !m.skip[pid] {
			u.DB += cpu - m.db[pid]
		}
	}
	return u
}

// parents are the processes whose children are the plugins.
func (m *meter) parents() map[int]bool {
	out := map[int]bool{}
	for _, pid := range m.serverPIDs {
		out[pid] = true
	}
	if len(out) == 0 {
		out[os.Getpid()] = true
	}
	return out
}

// resetPeakRSS sets a process's VmHWM back to its current RSS (Linux 4.0+;
// the bench starts the processes it measures, so it may write there).
func resetPeakRSS(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU returns the CPU time of every running plugin process that is
// a child of one of parents, and of the database server dbPID and its children,
// by pid. Plugins are found by name because go-plugin does not hand out
// the pid; the kernel's comm is cut to 15 bytes, which still holds
// "hymical-plugin".
func processCPU(parents map[int]bool, dbPID int) (plugin, db map[int]time.Duration) {
	plugin, db = map[int]time.Duration{}, map[int]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		comm, ppid, cpu, ok := procStat(pid)
		switch {
		case !ok:
		case parents[ppid] && strings.HasPrefix(comm, "hymical-plugin"):
			plugin[pid] = cpu
		case dbPID != 0 && (pid == dbPID || ppid == dbPID):
			db[pid] = cpu
		}
	}
	return plugin, db
}

// listenerPID finds the process listening on a loopback TCP port, by the
// socket's inode in /proc/net/tcp and the process holding it open. It
// returns 0 when it cannot tell, for instance for a server on another host
// or in another PID namespace; the report then has no database CPU.
func listenerPID(port int) int {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			// sl local_address rem_address st ... inode (field 9)
			if len(f) < 10 || f[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}

// procStat reads comm, the parent pid and utime+stime from /proc/pid/stat.
func procStat(pid int) (comm string, ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, false
	}
	// comm is in parentheses and may itself contain spaces or ')'.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, 0, false
	}
	comm = string(b[open+1 : end])
	fields := strings.Fields(string(b[end+1:]))
	// After comm: state(0) ppid(1) ... utime(11) stime(12).
	if len(fields) < 13 {
		return "", 0, 0, false
	}
	ppid, _ = strconv.Atoi(fields[1])
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return comm, ppid, time.Duration(ut+st) * time.Second / userHZ, true
}

// machineBusy is the machine's busy CPU time, all cores, since boot: the
// first line of /proc/stat less idle and iowait.
func machineBusy() time.Duration {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range fields[1:] {
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user, so stop at steal.
		if i >= 8 {
			break
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 {
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / userHZ
}

// statusBytes reads a "kB" line such as VmHWM from a /proc status file.
func statusBytes(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseInt(f[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// percentile returns the p-th percentile (0 < p ≤ 100) of ds, sorting it.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	// Nearest rank: the smallest value with at least p% at or below it.
	i := int(float64(len(ds))*p/100+0.9999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Machine describes where a run happened.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	MemTotal int64  `json:"mem_total_bytes"`
	OS       string `json:"os"`
	Go       string `json:"go"`
	Kernel   string `json:"kernel"`
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.MemTotal = statusBytes("/proc/meminfo", "MemTotal:")
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// fsType names the file system a directory is on, so a SQLite number
// taken on tmpfs (where fsync costs nothing) is not mistaken for disk.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case 0xEF53:
		return "ext4"
	case 0x01021994:
		return "tmpfs"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794C7630:
		return "overlayfs"
	}
	return fmt.Sprintf("0x%x", st.Type)
}
