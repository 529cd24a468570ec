package connlimit

// The defaults are derived from the process's descriptor limit
// (RLIMIT_NOFILE; Go raises the soft limit to the hard one at start-up,
// so that is the figure read).
const (
	// ReserveFixed and ReserveFraction make the descriptors kept back from
	// API connections: ReserveFixed plus ReserveFraction of the limit.
	// They cover the database pool (PostgreSQL connections, or the SQLite
	// file, its WAL and shared memory per connection), each plugin's
	// pipes and gRPC socket twice over (a restarting plugin holds the old
	// and the new for a moment), the telemetry exporter, log files and
	// the runtime's own.
	ReserveFixed    = 128
	ReserveFraction = 8
	// DefaultMaxCeiling caps the default: an idle connection costs a
	// goroutine and its buffers, about 20 KiB, so 10,000 of them is about
	// 200 MiB however many descriptors the system allows.
	DefaultMaxCeiling = 10000
	// DefaultPerAddressCeiling caps the per-address default: far more than
	// a browser (6) or an HTTP client pool uses, and a small share of the
	// total even at a 2,048 descriptor limit.
	DefaultPerAddressCeiling = 256
	// fallbackFDLimit is assumed where the limit cannot be read: the
	// common soft limit.
	fallbackFDLimit = 1024
)

// Defaults are the limits for a process that may open fdLimit descriptors
// (0: unknown): the limit less the reserve, at most DefaultMaxCeiling and
// at least 16; per address, a quarter of that, at most
// DefaultPerAddressCeiling, so one address never holds more than a
// quarter of the room.
func Defaults(fdLimit uint64) (maxConns, perAddress int) {
	if fdLimit == 0 {
		fdLimit = fallbackFDLimit
	}
	reserve := ReserveFixed + fdLimit/ReserveFraction
	maxConns = 16
	if fdLimit > reserve+16 {
		maxConns = int(min(fdLimit-reserve, DefaultMaxCeiling))
	}
	perAddress = min(max(maxConns/4, 1), DefaultPerAddressCeiling)
	return maxConns, perAddress
}
