package main

import (
	"context"
	"runtime/metrics"
	"time"
)

// After a burst an idle serve held on to what its heap had grown to: at
// gctarget.Serve the collector lets the heap reach five times what is
// live before it collects, and the runtime keeps that much mapped. Having
// just delivered once to each of 100,000 endpoints, an idle serve stayed
// at 111-137 MiB resident, against 31-33 MiB for one that had not (issue
// 39). So once serve goes quiet (it allocates next to nothing for a
// while), it collects and gives the heap's spare memory back, at most
// once a quietReturnEvery.
const (
	// quietTick is how often serve looks, and quietAllocs the most it may
	// allocate in a tick and still count as quiet: an idle serve's polls
	// and heartbeats allocate a few KiB a second, a delivery tens of KiB.
	quietTick   = 500 * time.Millisecond
	quietAllocs = 128 << 10
	// quietSpare is how much more than the live heap the runtime must hold
	// for a return to be worth a collection.
	quietSpare       = 16 << 20
	quietReturnEvery = 30 * time.Second
)

// heapSample is what returnMemoryWhenQuiet reads of the runtime.
type heapSample struct {
	allocs uint64 // bytes allocated since the start
	held   uint64 // heap memory the runtime holds: objects, free and unused
	live   uint64 // the live heap as of the last collection
}

// readHeap reads a heapSample from runtime/metrics.
func readHeap() heapSample {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return heapSample{allocs: v(0), held: v(1) + v(2) + v(3), live: v(4)}
}

// quietSpareToReturn reports whether, going from prev to cur over one
// quietTick, serve was quiet and holds enough spare heap to give back.
func quietSpareToReturn(prev, cur heapSample) bool {
	return cur.allocs-prev.allocs <= quietAllocs && cur.held > cur.live+quietSpare
}

// returnMemoryWhenQuiet gives the heap's spare memory back to the OS each
// time serve goes quiet after a burst, until ctx ends.
func returnMemoryWhenQuiet(ctx context.Context, read func() heapSample, give func()) {
	t := time.NewTicker(quietTick)
	defer t.Stop()
	prev := read()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			cur := read()
			if quietSpareToReturn(prev, cur) && now.Sub(last) >= quietReturnEvery {
				give()
				last = now
				cur = read()
			}
			prev = cur
		}
	}
}
