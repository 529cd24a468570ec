package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hymical/hymical/server/backup"
	"github.com/hymical/hymical/server/config"
	"github.com/hymical/hymical/server/database"
)

const backupUsage = `usage: hymical backup --to FILE [--config FILE] [--KEY=VALUE…]

Writes a consistent copy of the SQLite database to FILE (mode 0600) while
hymical serve goes on running on it: one instant's snapshot, made with
SQLite's VACUUM INTO. It reads the configuration serve reads (the --config
file, the FORMS_* environment, --KEY=VALUE flags) for database.url and the
secrets key, and never replaces a file: FILE must not exist.

It says where the key that encrypts the endpoints' signing secrets is.
That key is not in the copy, and must not be kept beside it: a backup with
its key hands out every endpoint's signing secret. To restore, put the
copy back as the database file, give serve the same key, and start it.

For PostgreSQL it refuses: use pg_dump (docs/backup.md).`

// runBackup is hymical backup: --to, then serve's configuration.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, backupUsage+"\n\nEvery key of serve's configuration is a flag too: see hymical serve --help.\n")
			return flag.ErrHelp
		}
	}
	to, rest, err := takeTo(args)
	if err != nil {
		fmt.Fprint(stderr, backupUsage+"\n")
		return err
	}
	cfg, _, err := config.Load(config.LoadOptions{
		Environ: serverEnviron(os.Environ()),
		Args:    rest,
		Program: "hymical backup",
		Output:  stdout,
		// A backup serves nothing, so it needs no admin token; the
		// check that serve has one is not this command's to fail. The
		// warnings are serve's too, and not shown.
		GenerateAdminToken: randomToken,
	})
	if err != nil {
		return err
	}
	return backup.Run(ctx, backup.Params{
		DatabaseURL: cfg.Database.URL.Reveal(),
		Secrets:     database.SecretsConfig{Key: cfg.Secrets.Key.Reveal(), KeyFile: cfg.Secrets.KeyFile},
		To:          to,
		Log:         slog.New(slog.NewTextHandler(stderr, nil)),
	}, stdout)
}

// takeTo takes --to FILE (or -to, or =FILE) out of args and returns it
// with the rest, which are serve's configuration flags.
func takeTo(args []string) (string, []string, error) {
	var to string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "to" {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return "", nil, fmt.Errorf("--to needs a value: the file to write the copy to")
			}
			i++
			value = args[i]
		}
		if to != "" {
			return "", nil, fmt.Errorf("--to is given twice: give one file")
		}
		if value == "" {
			return "", nil, fmt.Errorf("--to needs a value: the file to write the copy to")
		}
		to = value
	}
	if to == "" {
		return "", nil, fmt.Errorf("backup needs --to FILE: the file to write the copy to, which must not exist yet")
	}
	return to, rest, nil
}
