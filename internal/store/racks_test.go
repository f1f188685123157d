package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/store/pgtest"
)

// TestRackMembersMigration: migration 0022 writes the memberships the
// rack label and a second listing used to make into the racks' lists
// (a node listed twice stays in the first rack by name; a node no rack
// lists joins the rack its label names, if there is one), on both
// dialects.
func TestRackMembersMigration(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) *SQL{
		"sqlite":   func(t *testing.T) *SQL { return openTemp(t) },
		"postgres": func(t *testing.T) *SQL { return openPG(t, pgtest.Database(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			ctx := t.Context()
			for n, rack := range map[string]string{"n1": "", "n2": "", "n3": "r1", "n4": "r3", "n5": "r9", "n6": "r1"} {
				labels := map[string]string{}
				if rack != "" {
					labels["rack"] = rack
				}
				if err := s.PutNode(ctx, gpufleet.Node{Name: n, Labels: labels}); err != nil {
					t.Fatal(err)
				}
			}
			for rack, nodes := range map[string]string{"r1": `["n1","n2"]`, "r2": `["n2","n3"]`, "r3": `[]`} {
				if _, err := s.wr.ExecContext(ctx, s.q(`INSERT INTO racks (name, power_budget_watts, production_reserve_watts, nodes, updated_at) VALUES (?, 1000, 0, ?, 0)`),
					rack, nodes); err != nil {
					t.Fatal(err)
				}
			}
			ms, err := loadMigrations(migrationFiles, s.d)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if m.name == "rack_members" {
					if _, err := s.wr.ExecContext(ctx, m.sql); err != nil {
						t.Fatal(err)
					}
				}
			}
			racks, err := s.Racks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, r := range racks {
				got[r.Name] = r.Nodes
			}
			want := map[string][]string{"r1": {"n1", "n2", "n6"}, "r2": {"n3"}, "r3": {"n4"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("racks' nodes after the migration (-want +got):\n%s", diff)
			}
		})
	}
}
