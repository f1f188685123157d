package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gpufleet/gpufleet"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// SQL is the Store over database/sql. With SQLite it holds two handles on
// the same file: one write connection, through which every write
// transaction goes in turn (SQLite allows one writer at a time, and one
// connection makes that a queue in Go rather than SQLITE_BUSY retries),
// and a pool of read-only connections that, in WAL mode, read a consistent
// snapshot without ever waiting for the writer.
type SQL struct {
	d     *dialect
	wr    *sql.DB // the single writer (SQLite) or the pool (PostgreSQL)
	rd    *sql.DB // read-only pool; wr itself for :memory:
	clock func() time.Time
	fail  func(name string)

	jobIDs, attemptIDs idGen

	commits chan *submitReq
	window  time.Duration
	maxJobs int
	quit    chan struct{}
	done    chan struct{}

	closeOnce sync.Once
	closeErr  error

	specs specMemo // ActiveJobs' decoded specs
}

var _ Store = (*SQL)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	clock       func() time.Time
	fail        func(name string)
	window      time.Duration
	maxJobs     int
	readConns   int
	busyTimeout time.Duration
	fullSync    bool
	pgPool      int
}

// WithClock sets the store's clock, used for lease expiry and for
// timestamps the caller leaves zero. The default is time.Now. With SQLite
// the server is the only process, so its clock stands in for the
// database's; a PostgreSQL dialect measures leases with the database's
// now() instead so that replicas agree.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.clock = now }
}

// WithFailpoint calls f at named points inside write transactions, after
// the writes and before the commit: "submit.before-commit",
// "schedule.before-commit" and "attempt.before-commit". A crash test
// passes a function that kills its own process at one of them and then
// checks that the reopened store holds either all or none of that
// transaction. f runs on the goroutine doing the write; it must not call
// back into the store.
func WithFailpoint(f func(name string)) Option {
	return func(o *options) { o.fail = f }
}

// WithGroupCommit tunes the submission committer: after the first waiting
// submission it gathers others for up to window, or until maxJobs jobs are
// waiting, and commits them in one transaction. Submissions that arrive
// while a commit is in flight are always gathered into the next one, so
// the default window of 0 already coalesces concurrent callers without
// adding latency to a lone one. maxJobs defaults to 256.
func WithGroupCommit(window time.Duration, maxJobs int) Option {
	return func(o *options) { o.window, o.maxJobs = window, maxJobs }
}

// WithReadConns sets the size of the read pool (default: GOMAXPROCS, at
// least 4).
func WithReadConns(n int) Option {
	return func(o *options) { o.readConns = n }
}

// WithPoolSize sets the PostgreSQL pool size (default 16; the DSN's
// pool_max_conns beats it). Reads and writes share the pool.
func WithPoolSize(n int) Option {
	return func(o *options) { o.pgPool = n }
}

// WithBusyTimeout sets how long SQLite waits for a lock held by another
// process before failing (default 5s). Within one process the store never
// waits on SQLite's locks: writes queue for the one write connection and
// WAL readers do not block.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) { o.busyTimeout = d }
}

// WithFullSync makes SQLite fsync the WAL at every commit
// (synchronous=FULL). The default, synchronous=NORMAL, makes every commit
// durable against a crash of the process (the WAL frames are written
// before the commit returns) but may lose the last commits to a power
// failure or kernel crash. Group commit makes FULL affordable.
func WithFullSync() Option {
	return func(o *options) { o.fullSync = true }
}

// Shared reports whether dsn names a database several servers may share
// (PostgreSQL), where one leads and the others follow.
func Shared(dsn string) bool { return isPostgresDSN(dsn) }

// Open opens the store named by dsn and brings its schema up to date.
//
//   - "PATH", "sqlite:PATH" or a "file:" URI: SQLite in WAL mode.
//   - ":memory:": a private in-memory SQLite database on one connection
//     (tests); readers then share the writer's connection.
//   - "postgres://..." or "postgresql://...": PostgreSQL (one pool, no
//     server-side prepared statements, so it works through a
//     transaction-mode pooler; see docs/HA.md).
func Open(ctx context.Context, dsn string, opts ...Option) (*SQL, error) {
	o := options{
		clock:       time.Now,
		maxJobs:     256,
		readConns:   max(4, runtime.GOMAXPROCS(0)),
		busyTimeout: 5 * time.Second,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxJobs <= 0 {
		o.maxJobs = 256
	}
	if o.readConns <= 0 {
		o.readConns = 1
	}
	if dsn == "" {
		return nil, fmt.Errorf("open: %w: empty database name", gpufleet.ErrInvalid)
	}
	s := &SQL{
		d:       &sqliteDialect,
		clock:   o.clock,
		fail:    o.fail,
		window:  o.window,
		maxJobs: o.maxJobs,
	}
	if isPostgresDSN(dsn) {
		s.d = &postgresDialect
		if err := s.openPostgres(ctx, dsn, o); err != nil {
			return nil, err
		}
	} else if err := s.openSQLite(ctx, dsn, o); err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	if err := s.seedIDs(ctx); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("open %s: %w", redact(dsn), err)
	}
	s.commits = make(chan *submitReq, 4*o.maxJobs)
	s.quit = make(chan struct{})
	s.done = make(chan struct{})
	go s.committer()
	return s, nil
}

// openSQLite opens the write handle and the read pool.
func (s *SQL) openSQLite(ctx context.Context, dsn string, o options) error {
	name := strings.TrimPrefix(dsn, "sqlite:")
	if strings.HasPrefix(name, "//") && !strings.HasPrefix(dsn, "file:") {
		name = strings.TrimPrefix(name, "//")
	}
	busy := fmt.Sprintf("_pragma=busy_timeout(%d)", o.busyTimeout.Milliseconds())
	if name == ":memory:" {
		db, err := sql.Open(s.d.driver, ":memory:?"+busy+"&_pragma=foreign_keys(1)")
		if err != nil {
			return err
		}
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		s.wr, s.rd = db, db
		return db.PingContext(ctx)
	}
	syncMode := "NORMAL"
	if o.fullSync {
		syncMode = "FULL"
	}
	sep := "?"
	if strings.Contains(name, "?") {
		sep = "&"
	}
	wdsn := name + sep + busy + "&_pragma=cache_size(-65536)&_pragma=mmap_size(268435456)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(" + syncMode + ")&_txlock=immediate"
	wr, err := sql.Open(s.d.driver, wdsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", dsn, err)
	}
	wr.SetMaxOpenConns(1)
	wr.SetMaxIdleConns(1)
	wr.SetConnMaxLifetime(0)
	wr.SetConnMaxIdleTime(0)
	if err := wr.PingContext(ctx); err != nil {
		wr.Close()
		return fmt.Errorf("open %s: %w", dsn, err)
	}
	var mode string
	if err := wr.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		wr.Close()
		return fmt.Errorf("open %s: %w", dsn, err)
	}
	if !strings.EqualFold(mode, "wal") {
		wr.Close()
		return fmt.Errorf("open %s: journal mode is %s, want wal", dsn, mode)
	}
	rd, err := sql.Open(s.d.driver, name+sep+busy+"&_pragma=cache_size(-16384)&_pragma=mmap_size(268435456)&_pragma=foreign_keys(1)&_query_only=1")
	if err != nil {
		wr.Close()
		return fmt.Errorf("open %s: %w", dsn, err)
	}
	rd.SetMaxOpenConns(o.readConns)
	rd.SetMaxIdleConns(o.readConns)
	s.wr, s.rd = wr, rd
	return nil
}

// redact hides a password in a URL-shaped dsn.
func redact(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dsn
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
}

// Close stops the committer, failing submissions still waiting with
// ErrClosed, and closes the database.
func (s *SQL) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		s.closeErr = s.closeDBs()
	})
	return s.closeErr
}

func (s *SQL) closeDBs() error {
	var errs []error
	if s.rd != nil && s.rd != s.wr {
		errs = append(errs, s.rd.Close())
	}
	if s.wr != nil {
		errs = append(errs, s.wr.Close())
	}
	return errors.Join(errs...)
}

// write runs fn in one write transaction and commits it. With SQLite it
// waits for the single write connection; the transaction starts with
// BEGIN IMMEDIATE so it never has to upgrade a read lock. With PostgreSQL
// the transaction is READ COMMITTED, its reads lock what they will write
// (FOR UPDATE, FOR SHARE), it sets lock_timeout and
// idle_in_transaction_session_timeout, and it runs again (a fresh
// transaction, fn from the start) after a deadlock or serialization
// failure.
func (s *SQL) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if b, _ := ctx.Value(batchKey{}).(*batch); b != nil {
		return b.add(ctx, fn)
	}
	if s.d.name != "postgres" {
		return s.writeOnce(ctx, fn)
	}
	var err error
	for attempt := 0; attempt < pgMaxTxAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt*attempt) * 5 * time.Millisecond):
			case <-ctx.Done():
				return err
			}
		}
		if err = s.writeOnce(ctx, fn); err == nil || !retryable(err) {
			return err
		}
	}
	return err
}

// batchKey carries, in a context, the batch of a Batch call that its
// writes join (nil: none, as when the batch commits).
type batchKey struct{}

// batch is the writes a Batch call collected, and the epoch they are
// fenced by (fenced false: none).
type batch struct {
	fns    []func(tx *sql.Tx) error
	epoch  int64
	fenced bool
}

// add defers fn to the batch's commit, with ctx's fence.
func (b *batch) add(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if e, ok := fenceOf(ctx); ok {
		if b.fenced && e != b.epoch {
			return fmt.Errorf("%w: one batch fenced by epochs %d and %d", ErrFenced, b.epoch, e)
		}
		b.epoch, b.fenced = e, true
	}
	b.fns = append(b.fns, fn)
	return nil
}

// Batch implements Store.
func (s *SQL) Batch(ctx context.Context, fn func(ctx context.Context) error) error {
	b := &batch{}
	if e, ok := fenceOf(ctx); ok {
		b.epoch, b.fenced = e, true
	}
	if err := fn(context.WithValue(ctx, batchKey{}, b)); err != nil {
		return err
	}
	if len(b.fns) == 0 {
		return nil
	}
	ctx = context.WithValue(ctx, batchKey{}, (*batch)(nil))
	if b.fenced {
		ctx = Fenced(ctx, b.epoch)
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		for _, fn := range b.fns {
			if err := fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *SQL) writeOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.wr.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() // after Commit a no-op; after a panic it frees the writer
	if s.d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, pgTxSettings); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
	}
	if epoch, ok := fenceOf(ctx); ok {
		if err := s.checkFence(ctx, tx, epoch); err != nil {
			return err
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// read runs fn in one read transaction on the read pool, so that
// everything fn reads comes from the same snapshot (PostgreSQL:
// REPEATABLE READ, READ ONLY).
func (s *SQL) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	var opts *sql.TxOptions
	if s.d.name == "postgres" {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, err := s.rd.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback()
	return fn(tx)
}

// failpoint calls the failpoint hook, when there is one.
func (s *SQL) failpoint(name string) {
	if s.fail != nil {
		s.fail(name)
	}
}

// q rebinds a query for the dialect.
func (s *SQL) q(query string) string { return s.d.rebind(query) }

// now is the store's clock in UTC.
func (s *SQL) now() time.Time { return s.clock().UTC() }

// orNow returns t, or the store's clock when t is zero.
func (s *SQL) orNow(t time.Time) time.Time {
	if t.IsZero() {
		return s.now()
	}
	return t.UTC()
}

// Timestamps are stored as BIGINT unix nanoseconds.

func nanos(t time.Time) int64 { return t.UnixNano() }

func nullNanos(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// ptrFloat is a nullable float column as a pointer.
func ptrFloat(n sql.NullFloat64) *float64 {
	if !n.Valid {
		return nil
	}
	v := n.Float64
	return &v
}

func ptrTime(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

// insertEvent appends one audit event inside tx.
func (s *SQL) insertEvent(ctx context.Context, tx *sql.Tx, e gpufleet.Event) error {
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO events (at, actor, kind, object, team, detail) VALUES (?, ?, ?, ?, ?, ?)`),
		nanos(s.orNow(e.At)), e.Actor, e.Kind, e.Object, e.Team, e.Detail)
	if err != nil {
		return fmt.Errorf("append event %s: %w", e.Kind, err)
	}
	return nil
}

// notFound wraps gpufleet.ErrNotFound with what was looked up.
func notFound(what, id string) error {
	return fmt.Errorf("%w: %s %q", gpufleet.ErrNotFound, what, id)
}

// invalid wraps gpufleet.ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{gpufleet.ErrInvalid}, args...)...)
}
