package server

import "time"

// SetHeartbeatInterval makes Run refresh the worker registry every d, so a
// test sees the heartbeat move without waiting fleet.HeartbeatInterval.
// Call it before Run.
func (s *Server) SetHeartbeatInterval(d time.Duration) { s.heartbeat = d }
