package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
	"github.com/gpufleet/gpufleet/internal/api"
)

// Token formats. User tokens read "gpf_<id>_<secret>", node credentials
// "gpn_<node>.<secret>", join tokens "gpj_<id>_<secret>"; secrets are 32
// random bytes. The readable prefix tells a leaked string's kind at a glance.
const (
	userPrefix = "gpf_"
	nodePrefix = "gpn_"
	joinPrefix = "gpj_"
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// randomString returns n random bytes, base32-encoded in lower case.
func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // the OS source never fails on Linux
	}
	return strings.ToLower(b32.EncodeToString(b))
}

func hashSecret(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// newSecret returns an id, the full token string and the hash of its secret.
func newSecret(prefix string) (id, token string, hash []byte) {
	id = randomString(5)
	secret := randomString(32)
	return id, prefix + id + "_" + secret, hashSecret(secret)
}

// errUnauthorized is returned for any bad credential, without saying which
// part was wrong.
var errUnauthorized = api.ErrUnauthorized

// authCacheTTL bounds how long a verified credential is trusted without
// reading the store again. A revocation on this replica takes effect at
// once; on other replicas within this time.
const authCacheTTL = 10 * time.Second

// cachedAuth is a verified credential: the SHA-256 of the whole bearer
// string, so a cache hit still compares secrets in constant time.
type cachedAuth struct {
	hash    []byte
	p       api.Principal
	expires time.Time
}

// authKey identifies a credential in the cache without holding its secret.
func authKey(bearer string) string {
	if i := strings.LastIndexAny(bearer, "_."); i > 0 {
		return bearer[:i]
	}
	return "admin"
}

// Authenticate resolves a bearer token: the admin token, a user token or a
// node credential. Secrets are compared in constant time. Verified
// credentials are cached briefly so that heartbeats and API calls do not
// read the store every time.
func (s *Server) Authenticate(ctx context.Context, bearer string) (api.Principal, error) {
	key, h := authKey(bearer), hashSecret(bearer)
	now := time.Now()
	s.authMu.Lock()
	c, ok := s.authCache[key]
	s.authMu.Unlock()
	if ok && now.Before(c.expires) && subtle.ConstantTimeCompare(h, c.hash) == 1 {
		return c.p, nil
	}
	p, err := s.authenticate(ctx, bearer)
	if err == nil {
		s.authMu.Lock()
		if len(s.authCache) > 100000 {
			s.authCache = map[string]cachedAuth{}
		}
		s.authCache[key] = cachedAuth{hash: h, p: p, expires: now.Add(authCacheTTL)}
		s.authMu.Unlock()
	}
	return p, err
}

// forget drops cached credentials whose key starts with prefix.
func (s *Server) forget(prefix string) {
	s.authMu.Lock()
	defer s.authMu.Unlock()
	for k := range s.authCache {
		if strings.HasPrefix(k, prefix) {
			delete(s.authCache, k)
		}
	}
}

func (s *Server) authenticate(ctx context.Context, bearer string) (api.Principal, error) {
	switch {
	case strings.HasPrefix(bearer, userPrefix):
		id, secret, ok := strings.Cut(strings.TrimPrefix(bearer, userPrefix), "_")
		if !ok {
			return api.Principal{}, errUnauthorized
		}
		rec, err := s.st.Token(ctx, id)
		if err != nil {
			if errors.Is(err, gpufleet.ErrNotFound) {
				subtle.ConstantTimeCompare(hashSecret(secret), s.adminHash) // same work either way
				return api.Principal{}, errUnauthorized
			}
			return api.Principal{}, err
		}
		if subtle.ConstantTimeCompare(hashSecret(secret), rec.Hash) != 1 || rec.RevokedAt != nil {
			return api.Principal{}, errUnauthorized
		}
		return api.Principal{TokenID: rec.ID, Role: rec.Role, Team: rec.Team}, nil
	case strings.HasPrefix(bearer, nodePrefix):
		rest := strings.TrimPrefix(bearer, nodePrefix)
		i := strings.LastIndexByte(rest, '.')
		if i <= 0 {
			return api.Principal{}, errUnauthorized
		}
		node, secret := rest[:i], rest[i+1:]
		cred, err := s.st.NodeCredential(ctx, node)
		if err != nil {
			if errors.Is(err, gpufleet.ErrNotFound) {
				return api.Principal{}, errUnauthorized
			}
			return api.Principal{}, err
		}
		h, now := hashSecret(secret), s.now()
		current := subtle.ConstantTimeCompare(h, cred.Hash) == 1 && now.Before(cred.ExpiresAt)
		previous := len(cred.PrevHash) > 0 && subtle.ConstantTimeCompare(h, cred.PrevHash) == 1 && now.Before(cred.PrevExpiresAt)
		if !current && !previous {
			return api.Principal{}, errUnauthorized
		}
		return api.Principal{TokenID: "node:" + node, Node: node}, nil
	}
	if subtle.ConstantTimeCompare(hashSecret(bearer), s.adminHash) == 1 {
		return api.Principal{TokenID: "admin", Role: gpufleet.RoleAdmin}, nil
	}
	return api.Principal{}, errUnauthorized
}

// actor names the principal in the audit log.
func actor(p api.Principal) string {
	switch {
	case p.Node != "":
		return "agent:" + p.Node
	case p.TokenID != "":
		return "token:" + p.TokenID
	}
	return "system"
}

// requireAdmin fails for members and agents.
func requireAdmin(p api.Principal) error {
	if !p.IsAdmin() {
		return fmt.Errorf("%w: admin only", api.ErrForbidden)
	}
	return nil
}

// requireUser fails for agents' credentials.
func requireUser(p api.Principal) error {
	if p.Role == "" {
		return fmt.Errorf("%w: a user token is required", api.ErrForbidden)
	}
	return nil
}

// teamOf resolves the team a request acts for: a member's own team (naming
// another is not found), or the team an admin names.
func teamOf(p api.Principal, named string) (string, error) {
	if p.IsAdmin() {
		if named == "" {
			return "", fmt.Errorf("%w: team: an admin must name one (--team)", gpufleet.ErrInvalid)
		}
		return named, nil
	}
	if named != "" && named != p.Team {
		return "", fmt.Errorf("%w: team %s", gpufleet.ErrNotFound, gpufleet.Quote(named))
	}
	return p.Team, nil
}

// visible reports whether p may see an object of team.
func visible(p api.Principal, team string) bool {
	return p.IsAdmin() || (p.Role == gpufleet.RoleMember && p.Team == team)
}
