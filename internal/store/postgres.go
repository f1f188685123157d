package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// PostgreSQL connection defaults. Each write transaction sets lock_timeout
// and idle_in_transaction_session_timeout with SET LOCAL (set_config(...,
// true)), which works through a transaction-mode pooler where startup
// parameters do not: a lock wait never outlasts a lease renewal, and a
// replica frozen inside a transaction (SIGSTOP, a long GC pause, a VM
// migration) has its session killed, and its locks released, well within
// the lease TTL.
const (
	pgDefaultPool          = 16
	pgLockTimeout          = 2 * time.Second
	pgIdleInTxTimeout      = 3 * time.Second
	pgMigrationLockTimeout = 30 * time.Second
	pgMaxTxAttempts        = 5
)

// isPostgresDSN reports whether dsn names PostgreSQL.
func isPostgresDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// openPostgres opens one pool for reads and writes (PostgreSQL has row
// locks and MVCC: there is no single writer). pgx runs in
// QueryExecModeExec unless the DSN says otherwise: the extended protocol
// with the unnamed statement, one round trip per query and no server-side
// prepared statements, so a transaction-mode pooler (pgbouncer) may hand
// each transaction a different server connection. The DSN may carry
// pool_max_conns=N (the pool size, default 16), which is not sent to the
// server.
func (s *SQL) openPostgres(ctx context.Context, dsn string, o options) error {
	pool := o.pgPool
	if u, err := url.Parse(dsn); err == nil {
		q := u.Query()
		if v := q.Get("pool_max_conns"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("open %s: pool_max_conns %q is not a positive number", redact(dsn), v)
			}
			pool = n
			q.Del("pool_max_conns")
			u.RawQuery = q.Encode()
			dsn = u.String()
		}
	}
	if pool <= 0 {
		pool = pgDefaultPool
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pool)
	db.SetMaxIdleConns(pool)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(30 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	s.wr, s.rd = db, db
	return nil
}

// pgTxSettings is the first statement of every PostgreSQL write
// transaction.
var pgTxSettings = fmt.Sprintf(`SELECT set_config('lock_timeout', '%dms', true), set_config('idle_in_transaction_session_timeout', '%dms', true)`,
	pgLockTimeout.Milliseconds(), pgIdleInTxTimeout.Milliseconds())

// errRetryTx asks write to run its function again in a new transaction:
// a row it meant to insert appeared meanwhile (PutNode by two replicas).
var errRetryTx = errors.New("transaction must be retried")

// retryable reports whether a failed PostgreSQL transaction may simply be
// run again: a serialization failure, a deadlock, or errRetryTx.
func retryable(err error) bool {
	if errors.Is(err, errRetryTx) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// pgDuplicateTable reports a CREATE TABLE IF NOT EXISTS that lost a race
// with another session creating the same table.
func pgDuplicateTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07" || pe.Code == "42710")
}

// stmt is a statement run many times in one transaction. With SQLite it
// is prepared once; with PostgreSQL each run is a plain query (the
// unnamed statement), since a prepared statement would live on a server
// connection that a pooler may not keep for us.
type stmt interface {
	ExecContext(ctx context.Context, args ...any) (sql.Result, error)
	Close() error
}

type txStmt struct {
	tx *sql.Tx
	q  string
}

func (t txStmt) ExecContext(ctx context.Context, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(ctx, t.q, args...)
}

func (t txStmt) Close() error { return nil }

// prepare returns a stmt for query (already rebound) inside tx.
func (s *SQL) prepare(ctx context.Context, tx *sql.Tx, query string) (stmt, error) {
	if s.d.name == "postgres" {
		return txStmt{tx, query}, nil
	}
	return tx.PrepareContext(ctx, query)
}

// lockJob takes the row lock of a job for the rest of the transaction
// (PostgreSQL; SQLite's single writer already serialises writers). Every
// transaction that reads a job or its attempts and then writes them
// locks the job first, so that they all take locks in the same order.
func (s *SQL) lockJob(ctx context.Context, tx *sql.Tx, id string) error {
	if s.d.forUpdate == "" {
		return nil
	}
	var got string
	err := tx.QueryRowContext(ctx, s.q(`SELECT id FROM jobs WHERE id = ?`+s.d.forUpdate), id).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("job", id)
	}
	if err != nil {
		return fmt.Errorf("lock job %s: %w", id, err)
	}
	return nil
}
