package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/storetest"
)

// TestSQLiteConformance runs the conformance suite on SQLite files.
func TestSQLiteConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "gpufleet.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestMemoryConformance runs the suite on a private in-memory database.
func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := store.Open(context.Background(), ":memory:")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
