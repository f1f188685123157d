package server

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet/internal/api"
)

// TestNodeCredentialRenewal checks that an agent renews with its credential
// alone, that the old credential works until its own expiry (an agent that
// lost the answer is not locked out), and that only agents can renew.
func TestNodeCredentialRenewal(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	f.srv.cfg.CredentialTTL = time.Hour
	old := f.register("n1", "l4", 1)
	p, err := f.srv.Authenticate(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(45 * time.Minute)
	resp, err := f.srv.RenewCredential(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Credential == old || !resp.ExpiresAt.Equal(f.clk.Now().Add(time.Hour)) {
		t.Fatalf("renewal: %+v", resp)
	}
	for _, c := range []string{old, resp.Credential} {
		if got, err := f.srv.Authenticate(ctx, c); err != nil || got.Node != "n1" {
			t.Errorf("before the old expiry: %+v %v", got, err)
		}
	}
	f.clk.Advance(16 * time.Minute) // the old credential's hour is over
	f.srv.forget("")                // past the credential cache
	if _, err := f.srv.Authenticate(ctx, old); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("old credential after its expiry: %v", err)
	}
	if got, err := f.srv.Authenticate(ctx, resp.Credential); err != nil || got.Node != "n1" {
		t.Errorf("new credential: %+v %v", got, err)
	}
	if _, err := f.srv.RenewCredential(ctx, f.admin); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("admin renewed a node credential: %v", err)
	}
}
