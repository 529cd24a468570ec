package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/hymical/hymical/internal/gctarget"
)

// serve gives its spare heap back once it is quiet, and only then: not
// while it allocates, and not when it holds little more than is live.
func TestQuietSpareToReturn(t *testing.T) {
	const mib = 1 << 20
	prev := heapSample{allocs: 1000 * mib}
	tests := []struct {
		name string
		cur  heapSample
		want bool
	}{
		{"quiet, heap grown past the live one", heapSample{allocs: 1000*mib + 4096, held: 120 * mib, live: 20 * mib}, true},
		{"still allocating", heapSample{allocs: 1001 * mib, held: 120 * mib, live: 20 * mib}, false},
		{"quiet, little spare", heapSample{allocs: 1000 * mib, held: 30 * mib, live: 20 * mib}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quietSpareToReturn(prev, tt.cur); got != tt.want {
				t.Errorf("quietSpareToReturn = %v, want %v", got, tt.want)
			}
		})
	}
}

// Read from the runtime, a heap that a burst grew is given back once the
// allocating stops: what the runtime holds falls to near what is live.
func TestReturnMemoryWhenQuietGivesBackAfterABurst(t *testing.T) {
	before := debug.SetGCPercent(gctarget.Serve)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	// A burst: 200 MiB allocated, little of it kept.
	var keep [][]byte
	for i := range 200 {
		b := make([]byte, 1<<20)
		if i%20 == 0 {
			keep = append(keep, b)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	gave := make(chan heapSample, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		returnMemoryWhenQuiet(ctx, readHeap, func() {
			debug.FreeOSMemory()
			select {
			case gave <- readHeap():
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case h := <-gave:
		if h.held > h.live+quietSpare {
			t.Errorf("after giving back, the runtime holds %d MiB of heap for %d MiB live", h.held>>20, h.live>>20)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a quiet process holding %d MiB of heap for %d MiB live gave nothing back in 10 s", readHeap().held>>20, readHeap().live>>20)
	}
	runtime.KeepAlive(keep)
}
