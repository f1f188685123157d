package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// migrationFiles are the schema's versions, NNNN_name.sql, applied in
// order. Each file is a text/template filled with the dialect's ddlTypes.
// Never edit a released migration; add the next one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one schema version.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads and renders the embedded migrations for d, sorted
// by version.
func loadMigrations(fsys fs.FS, d *dialect) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := path.Base(n)
		num, rest, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", base)
		}
		src, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(base).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, d.ddl); err != nil {
			return nil, fmt.Errorf("migration %s: %w", base, err)
		}
		out = append(out, migration{version: v, name: rest, sql: b.String()})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			return nil, fmt.Errorf("migration version %d appears twice", out[i].version)
		}
	}
	return out, nil
}

// migrate brings the schema up to the newest embedded version. Each
// migration and its schema_migrations row commit together, and the
// current version is read inside that transaction, so running migrate
// twice, or from two processes at once, applies nothing twice. A database
// whose version is newer than any this binary knows is an error: an older
// binary must not write to a schema it does not understand.
func (s *SQL) migrate(ctx context.Context) error {
	ms, err := loadMigrations(migrationFiles, s.d)
	if err != nil {
		return err
	}
	create := `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at BIGINT NOT NULL
)`
	for try := 0; ; try++ {
		_, err := s.wr.ExecContext(ctx, create)
		if err == nil {
			break
		}
		// Two PostgreSQL replicas starting at once may race to create the
		// table; the loser sees a duplicate and finds it there next time.
		if s.d.name != "postgres" || try >= 3 || !pgDuplicateTable(err) {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].version
	}
	cur, err := schemaVersion(ctx, s.wr)
	if err != nil {
		return err
	}
	if cur > latest {
		return fmt.Errorf("database schema version %d is newer than this binary's %d: upgrade gpufleet", cur, latest)
	}
	for _, m := range ms {
		if m.version <= cur {
			continue
		}
		err := s.write(ctx, func(tx *sql.Tx) error {
			if s.d.name == "postgres" {
				// Replicas migrating at once take turns on a table lock held
				// to the end of the transaction: no session advisory lock,
				// so this works through a transaction-mode pooler. A
				// migration runs once, at start, when a busy host may pause
				// the process for longer than a cycle's idle timeout: it
				// gets the migration lock's bound for both.
				if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SELECT set_config('lock_timeout', '%[1]dms', true), set_config('idle_in_transaction_session_timeout', '%[1]dms', true)`,
					pgMigrationLockTimeout.Milliseconds())); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `LOCK TABLE schema_migrations IN SHARE ROW EXCLUSIVE MODE`); err != nil {
					return fmt.Errorf("lock schema_migrations: %w", err)
				}
			}
			v, err := schemaVersion(ctx, tx)
			if err != nil {
				return err
			}
			if v >= m.version {
				return nil // another process applied it
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, s.d.rebind(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`),
				m.version, m.name, s.clock().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("apply migration %04d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}

// queryer is what *sql.DB and *sql.Tx have in common.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaVersion is the highest applied migration, 0 for none.
func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var v sql.NullInt64
	if err := q.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v.Int64), nil
}

// SchemaVersion reports the database's schema version: the newest
// migration applied.
func (s *SQL) SchemaVersion(ctx context.Context) (int, error) {
	return schemaVersion(ctx, s.rd)
}
