package connlimit

import (
	"cmp"
	"fmt"
)

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
// at least 16; per address, DefaultPerAddress of that.
func Defaults(fdLimit uint64) (maxConns, perAddress int) {
	maxConns = 16
	if room := Room(fdLimit); room > 16 {
		maxConns = int(min(room, DefaultMaxCeiling))
	}
	return maxConns, DefaultPerAddress(maxConns)
}

// DefaultPerAddress is a quarter of maxConns, at most
// DefaultPerAddressCeiling: one address never takes more than a quarter
// of the room, so three more can always be served.
func DefaultPerAddress(maxConns int) int {
	return min(max(maxConns/4, 1), DefaultPerAddressCeiling)
}

// Room is how many descriptors fdLimit (0: unknown) leaves for
// connections once the reserve is kept, or 0 if it does not cover the
// reserve.
func Room(fdLimit uint64) uint64 {
	if fdLimit == 0 {
		fdLimit = fallbackFDLimit
	}
	reserve := ReserveFixed + fdLimit/ReserveFraction
	if fdLimit <= reserve {
		return 0
	}
	return fdLimit - reserve
}

// Limits resolves configured limits, where 0 means the default, for a
// process that may open fdLimit descriptors (0: unknown), and says what
// is amiss with them in warnings: a total above what the descriptors
// leave after the reserve, or a per-address limit above the total, which
// is lowered to it.
func Limits(maxConns, perAddress int, fdLimit uint64) (total, perAddr int, warnings []string) {
	if fdLimit == 0 {
		fdLimit = fallbackFDLimit
	}
	defMax, _ := Defaults(fdLimit)
	total = cmp.Or(maxConns, defMax)
	perAddr = cmp.Or(perAddress, DefaultPerAddress(total))
	if room := Room(fdLimit); maxConns > 0 && uint64(maxConns) > room {
		warnings = append(warnings, fmt.Sprintf("server.max_connections is %d, but the descriptor limit of %d leaves room for %d connections after keeping %d for the database, the plugins and telemetry: at the limit accepting fails and every client waits. Raise the limit (LimitNOFILE= in the systemd unit, ulimit -n) or lower server.max_connections", maxConns, fdLimit, room, fdLimit-room))
	}
	if perAddr > total {
		warnings = append(warnings, fmt.Sprintf("server.max_connections_per_address is %d, more than the %d connections allowed in all (server.max_connections, 0 derives it from the descriptor limit of %d): it is lowered to %d", perAddr, total, fdLimit, total))
		perAddr = total
	}
	return total, perAddr, warnings
}
