package e2e

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, to corrupt a row

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
	"github.com/gpufleet/gpufleet/internal/store"
	"github.com/gpufleet/gpufleet/internal/store/pgtest"
)

// TestPoisonRowsDoNotStopTheLeader writes poison rows straight into the
// store of a stopped server, the way the report found it (a job asking
// 2^31 GPUs, which the scheduler once narrowed to a negative int32 and
// panicked on at every start), plus one whose spec no version can read,
// then restarts the server: it must stay up, fail those jobs with reason
// code invalid_request and place the others. On SQLite and PostgreSQL.
func TestPoisonRowsDoNotStopTheLeader(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "gpufleet.db")
		poisonRun(t, dir, path, nil, func(query string, args ...any) error {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.Exec(query, args...)
			return err
		})
	})
	t.Run("postgres", func(t *testing.T) {
		srv := pgtest.Shared(t)
		dsn := srv.NewDatabase(t)
		poisonRun(t, t.TempDir(), dsn, []string{"--db", dsn}, func(query string, args ...any) error {
			return srv.Exec(dsn, strings.ReplaceAll(query, "?", "$1"), args...)
		})
	})
}

func poisonRun(t *testing.T, dir, dsn string, args []string, exec func(query string, args ...any) error) {
	ctx := t.Context()
	// A fixed port: the clients find the restarted server at the same URL.
	p := startServer(t, dir, nil, append(args, "--listen", "127.0.0.1:"+freePort(t))...)
	f := setupTeams(t, p, "team-a")
	member := f.members["team-a"]
	agent := registerAgent(t, p, f.admin, "n1", "h100-sxm-80gb", 8)
	before, err := member.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 2}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	p.kill()

	st, err := store.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	est := 60.0
	poison := func(res gpufleet.Resources) string {
		out, err := st.SubmitJobs(ctx, []gpufleet.Job{{Team: "team-a", State: gpufleet.JobQueued, Priority: gpufleet.Batch,
			Resources: res, Command: []string{"true"}, EstimateS: &est, SubmittedAt: time.Now()}}, "test")
		if err != nil || out[0].Err != nil {
			t.Fatalf("poison row: %v %v", err, out)
		}
		return out[0].Job.ID
	}
	wrapped := poison(gpufleet.Resources{GPUs: 1 << 31})
	wrapsToSix := poison(gpufleet.Resources{GPUs: 1<<32 + 6})
	garbled := poison(gpufleet.Resources{GPUs: 1})
	st.Close()
	if err := exec(`UPDATE jobs SET spec = '{"resources":{"gpus":"many"},"command":["true"]}' WHERE id = ?`, garbled); err != nil {
		t.Fatal(err)
	}

	p.start()
	after, err := member.SubmitJob(ctx, api.SubmitRequest{Resources: gpufleet.Resources{GPUs: 4}, Command: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the poison jobs fail and the others run", func() error {
		if _, err := agent.beat(ctx); err != nil {
			return err
		}
		for _, id := range []string{wrapped, wrapsToSix, garbled} {
			j, err := f.admin.Job(ctx, id)
			if err != nil {
				return err
			}
			if j.State != gpufleet.JobFailed || j.ReasonCode != "invalid_request" {
				return fmt.Errorf("poison job %s: %s %q", id, j.State, j.ReasonCode)
			}
		}
		for _, id := range []string{before.ID, after.ID} {
			j, err := member.Job(ctx, id)
			if err != nil {
				return err
			}
			if j.State != gpufleet.JobRunning && j.State != gpufleet.JobScheduled {
				return fmt.Errorf("job %s: %s", id, j.State)
			}
		}
		return nil
	})
	select {
	case <-p.exited:
		t.Fatal("the server exited")
	default:
	}
	j, _ := f.admin.Job(ctx, wrapped)
	t.Logf("poison job %s: %s", wrapped, j.Reason)
}
