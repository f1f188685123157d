package store_test

import (
	"testing"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/pgtest"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// openPG opens a store on dsn, closed when the test ends.
func openPG(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestPostgresConformance runs the conformance suite on PostgreSQL, a
// fresh database per subtest.
func TestPostgresConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openPG(t, pgtest.Database(t)) })
}

// TestPostgresConformanceThroughPgbouncer runs it again through pgbouncer
// in transaction mode: no session state, no server-side prepared
// statements.
func TestPostgresConformanceThroughPgbouncer(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openPG(t, srv.Bouncer(t, srv.NewDatabase(t)))
	})
}
