package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hymical/hymical/sdk/redact"

	"github.com/hymical/hymical/server/database"
	"github.com/hymical/hymical/storage"
)

// freshStore is one phase's database: created empty, migrated, and removed
// afterwards, so every phase starts from the same empty tables and a run
// never reads or writes anything it did not create.
type freshStore struct {
	storage.Store
	// where names it for the report, without credentials.
	where string
	// dsn is the PostgreSQL database's URL; empty for SQLite.
	dsn string
	// url is what `serve --database.url` takes to open it.
	url    string
	remove func(context.Context) error
	// closeStore closes Store once, whether handOver or remove asks first.
	closeStore func() error
}

// handOver closes this process's handle on the database, so that the serve
// process of the HTTP mode is the only one using it, as in production. The
// database is still removed by remove.
func (fs *freshStore) handOver() error { return fs.closeStore() }

// openFresh creates a new database for o.Backend: a new SQLite file in a
// new directory under o.SQLiteDir, or a new database on the PostgreSQL
// server o.DatabaseURL names (its user needs CREATEDB).
func openFresh(ctx context.Context, o Options) (*freshStore, error) {
	switch o.Backend {
	case BackendSQLite:
		dir, err := os.MkdirTemp(o.SQLiteDir, "hymical-bench-")
		if err != nil {
			return nil, fmt.Errorf("make a directory for the bench's SQLite file under %q: %w", o.SQLiteDir, err)
		}
		path := filepath.Join(dir, "bench.db")
		s, err := database.Open(ctx, "sqlite:"+path)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		fs := &freshStore{Store: s, where: fmt.Sprintf("sqlite:%s (%s)", path, fsType(dir)), url: "sqlite:" + path, closeStore: sync.OnceValue(s.Close)}
		fs.remove = func(context.Context) error {
			err := fs.closeStore()
			if o.Keep {
				return err
			}
			return errors.Join(err, os.RemoveAll(dir))
		}
		return fs.migrated(ctx)
	case BackendPostgres:
		name, dsn, err := createDatabase(ctx, o.DatabaseURL)
		if err != nil {
			return nil, err
		}
		drop := func(ctx context.Context) error {
			if o.Keep {
				return nil
			}
			return dropDatabase(ctx, o.DatabaseURL, name)
		}
		s, err := database.Open(ctx, dsn)
		if err != nil {
			return nil, errors.Join(err, drop(ctx))
		}
		fs := &freshStore{Store: s, where: redact.URL(dsn), dsn: dsn, url: dsn, closeStore: sync.OnceValue(s.Close)}
		fs.remove = func(ctx context.Context) error { return errors.Join(fs.closeStore(), drop(ctx)) }
		return fs.migrated(ctx)
	}
	return nil, fmt.Errorf("backend %q is not sqlite or postgres", o.Backend)
}

// removeInto removes the phase's database, joining any failure into *err;
// deferred by the phase that made it. Removal gets its own time: the
// phase's context may be what ended.
func (fs *freshStore) removeInto(ctx context.Context, phase string, err *error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if rerr := fs.remove(rctx); rerr != nil {
		*err = errors.Join(*err, fmt.Errorf("%s: remove the bench database: %w", phase, rerr))
	}
}

func (fs *freshStore) migrated(ctx context.Context) (*freshStore, error) {
	if _, err := fs.Migrate(ctx, storage.MigrateParams{}); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate the bench database %s: %w", fs.where, err), fs.remove(ctx))
	}
	if _, err := database.CheckSchema(ctx, fs); err != nil {
		return nil, errors.Join(err, fs.remove(ctx))
	}
	return fs, nil
}

// createDatabase makes an empty database named hymical_bench_<random> on
// the server base names and returns its name and DSN.
func createDatabase(ctx context.Context, base string) (string, string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	name := "hymical_bench_" + hex.EncodeToString(b[:])
	dsn, err := withDatabase(base, name)
	if err != nil {
		return "", "", err
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", "", fmt.Errorf("connect to %s to create a bench database: %w", redact.URL(base), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", "", fmt.Errorf("create bench database %s on %s (the user needs CREATEDB): %w", name, redact.URL(base), err)
	}
	return name, dsn, nil
}

func dropDatabase(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("connect to %s to drop bench database %s: %w", redact.URL(base), name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop bench database %s: %w", name, err)
	}
	return nil
}

// withDatabase points a postgres:// URL at database name, keeping its
// user, host and parameters (pool_max_conns, sslmode, ...).
func withDatabase(dsn, name string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return "", fmt.Errorf("the bench's --database must be a postgres:// URL, got %q", redact.URL(dsn))
	}
	u, err := url.Parse(dsn)
	if err != nil {
		// url's error quotes the whole URL, password included.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("the bench's --database does not parse as a URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}
