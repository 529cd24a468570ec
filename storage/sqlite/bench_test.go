package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/storagetest"
)

// BenchmarkStore runs the store benchmarks on a fresh SQLite file each:
//
//	go test -run '^$' -bench . ./storage/sqlite
func BenchmarkStore(b *testing.B) {
	bk := backend
	bk.NewBenchStore = func(tb testing.TB) storage.Store {
		tb.Helper()
		path := filepath.Join(tb.TempDir(), "bench.db")
		s, err := Open(context.Background(), path)
		if err != nil {
			tb.Fatalf("open sqlite store on %s: %v", path, err)
		}
		tb.Cleanup(func() {
			if err := s.Close(); err != nil {
				tb.Errorf("close sqlite store: %v", err)
			}
		})
		return s
	}
	storagetest.Bench(b, bk)
}
