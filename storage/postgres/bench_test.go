package postgres_test

import (
	"context"
	"testing"

	"github.com/hymical/hymical/storage"
	"github.com/hymical/hymical/storage/postgres"
	"github.com/hymical/hymical/storage/postgres/pgtest"
	"github.com/hymical/hymical/storage/storagetest"
)

// BenchmarkStore runs the store benchmarks on a fresh database each, on
// the server HYMICAL_TEST_POSTGRES_DSN names:
//
//	eval "$(.ci/postgres.sh)"
//	go test -run '^$' -bench . ./storage/postgres
func BenchmarkStore(b *testing.B) {
	bk := backend
	bk.NewBenchStore = func(tb testing.TB) storage.Store {
		tb.Helper()
		// pgtest drops the database on cleanup, after the store below is
		// closed (cleanups run last registered first).
		s, err := postgres.Open(context.Background(), pgtest.NewDatabase(tb))
		if err != nil {
			tb.Fatalf("open store: %v", err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		return s
	}
	storagetest.Bench(b, bk)
}
