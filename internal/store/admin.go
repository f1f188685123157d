package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpufleet/gpufleet"
)

// PutTeam creates or replaces a team's quota, borrowing limit and weight.
// Team.Used is not stored: the server computes it.
func (s *SQL) PutTeam(ctx context.Context, t gpufleet.Team, actor string) error {
	if t.Name == "" {
		return invalid("team name is empty")
	}
	if t.Weight < 0 {
		return invalid("team %s: weight %v is negative", t.Name, t.Weight)
	}
	for class, n := range t.Quota {
		if n < 0 {
			return invalid("team %s: quota for %s is negative", t.Name, class)
		}
	}
	quota := t.Quota
	if quota == nil {
		quota = map[string]int{}
	}
	q, err := json.Marshal(quota)
	if err != nil {
		return invalid("team %s: quota: %v", t.Name, err)
	}
	mounts, auth := t.Mounts, t.RegistryAuth
	if mounts == nil {
		mounts = []gpufleet.MountAllow{}
	}
	if auth == nil {
		auth = map[string]gpufleet.RegistryCredential{}
	}
	m, _ := json.Marshal(mounts)
	a, _ := json.Marshal(auth)
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		// A new team takes the next uid offset; an existing one keeps its own.
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO teams (name, quota, borrowing_limit, weight, updated_at, mounts, registry_auth, uid_offset)
	VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT COALESCE(MAX(uid_offset), -1) + 1 FROM teams))
	ON CONFLICT (name) DO UPDATE SET quota = excluded.quota, borrowing_limit = excluded.borrowing_limit,
	weight = excluded.weight, updated_at = excluded.updated_at, mounts = excluded.mounts, registry_auth = excluded.registry_auth`),
			t.Name, string(q), t.BorrowingLimit, t.Weight, nanos(now), string(m), string(a)); err != nil {
			return fmt.Errorf("put team %s: %w", t.Name, err)
		}
		// The event names the registries, never their credentials.
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "team.put", Object: t.Name, Team: t.Name,
			Detail: fmt.Sprintf("quota=%s borrowing_limit=%d weight=%g mounts=%s registries=%v", q, t.BorrowingLimit, t.Weight, m,
				slices.Sorted(maps.Keys(auth)))})
	})
}

// teamCols is the column list scanTeam reads.
const teamCols = `name, quota, borrowing_limit, weight, mounts, registry_auth, uid_offset`

// scanTeam reads teamCols. Quota is never nil; Used is left nil for the
// server to fill.
func scanTeam(r scanner) (gpufleet.Team, error) {
	var (
		t                   gpufleet.Team
		quota, mounts, auth string
		offset              sql.NullInt64
	)
	if err := r.Scan(&t.Name, &quota, &t.BorrowingLimit, &t.Weight, &mounts, &auth, &offset); err != nil {
		return t, err
	}
	t.UIDOffset = int(offset.Int64)
	if err := json.Unmarshal([]byte(quota), &t.Quota); err != nil {
		return t, fmt.Errorf("team %s: decode quota: %w", t.Name, err)
	}
	if err := json.Unmarshal([]byte(mounts), &t.Mounts); err != nil {
		return t, fmt.Errorf("team %s: decode mounts: %w", t.Name, err)
	}
	if err := json.Unmarshal([]byte(auth), &t.RegistryAuth); err != nil {
		return t, fmt.Errorf("team %s: decode registry_auth: %w", t.Name, err)
	}
	t.Registries = slices.Sorted(maps.Keys(t.RegistryAuth))
	if len(t.Mounts) == 0 {
		t.Mounts = nil
	}
	if t.Quota == nil {
		t.Quota = map[string]int{}
	}
	return t, nil
}

// Team reads one team.
func (s *SQL) Team(ctx context.Context, name string) (gpufleet.Team, error) {
	t, err := scanTeam(s.rd.QueryRowContext(ctx, s.q(`SELECT `+teamCols+` FROM teams WHERE name = ?`), name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, notFound("team", name)
	}
	if err != nil {
		return t, fmt.Errorf("read team %s: %w", name, err)
	}
	return t, nil
}

// Teams lists the teams by name.
func (s *SQL) Teams(ctx context.Context) ([]gpufleet.Team, error) {
	return list(ctx, s.rd, `SELECT `+teamCols+` FROM teams ORDER BY name`, nil, scanTeam)
}

// list runs a query and scans every row with scan; never nil.
func list[T any](ctx context.Context, q queryer, query string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// PutClass creates or replaces a GPU class.
func (s *SQL) PutClass(ctx context.Context, c gpufleet.Class, actor string) error {
	if c.Name == "" {
		return invalid("class name is empty")
	}
	models := c.Models
	if models == nil {
		models = []string{}
	}
	m, err := json.Marshal(models)
	if err != nil {
		return invalid("class %s: %v", c.Name, err)
	}
	now := s.now()
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO classes (name, models, updated_at) VALUES (?, ?, ?)
	ON CONFLICT (name) DO UPDATE SET models = excluded.models, updated_at = excluded.updated_at`), c.Name, string(m), nanos(now)); err != nil {
			return fmt.Errorf("put class %s: %w", c.Name, err)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: now, Actor: actor, Kind: "class.put", Object: c.Name, Detail: string(m)})
	})
}

// Classes lists the GPU classes by name.
func (s *SQL) Classes(ctx context.Context) ([]gpufleet.Class, error) {
	return list(ctx, s.rd, `SELECT name, models FROM classes ORDER BY name`, nil, func(r scanner) (gpufleet.Class, error) {
		var (
			c gpufleet.Class
			m string
		)
		if err := r.Scan(&c.Name, &m); err != nil {
			return c, err
		}
		if err := json.Unmarshal([]byte(m), &c.Models); err != nil {
			return c, fmt.Errorf("class %s: %w", c.Name, err)
		}
		return c, nil
	})
}

// CreateToken stores an API token (its hash). An id in use wraps
// gpufleet.ErrInvalid.
func (s *SQL) CreateToken(ctx context.Context, t TokenRecord, actor string) error {
	switch {
	case t.ID == "":
		return invalid("token id is empty")
	case len(t.Hash) == 0:
		return invalid("token %s: hash is empty", t.ID)
	case t.Role != gpufleet.RoleAdmin && t.Role != gpufleet.RoleMember && t.Role != gpufleet.RoleMonitor:
		return invalid("token %s: role %q", t.ID, t.Role)
	case t.Role == gpufleet.RoleMember && t.Team == "":
		return invalid("token %s: a member token needs a team", t.ID)
	}
	created := s.orNow(t.CreatedAt)
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO tokens (id, hash, team, role, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?)
	ON CONFLICT DO NOTHING`), t.ID, t.Hash, t.Team, string(t.Role), nanos(created), nullNanos(t.RevokedAt))
		if err != nil {
			return fmt.Errorf("create token %s: %w", t.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return invalid("token id %q is in use", t.ID)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: created, Actor: actor, Kind: "token.created", Object: t.ID, Team: t.Team, Detail: string(t.Role)})
	})
}

func scanToken(r scanner) (TokenRecord, error) {
	var (
		t       TokenRecord
		role    string
		created int64
		revoked sql.NullInt64
	)
	if err := r.Scan(&t.ID, &t.Hash, &t.Team, &role, &created, &revoked); err != nil {
		return t, err
	}
	t.Role, t.CreatedAt, t.RevokedAt = gpufleet.Role(role), fromNanos(created), ptrTime(revoked)
	return t, nil
}

// Token reads one API token.
func (s *SQL) Token(ctx context.Context, id string) (TokenRecord, error) {
	t, err := scanToken(s.rd.QueryRowContext(ctx, s.q(`SELECT id, hash, team, role, created_at, revoked_at FROM tokens WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return t, notFound("token", id)
	}
	if err != nil {
		return t, fmt.Errorf("read token %s: %w", id, err)
	}
	return t, nil
}

// Tokens lists the API tokens in creation order.
func (s *SQL) Tokens(ctx context.Context) ([]TokenRecord, error) {
	return list(ctx, s.rd, `SELECT id, hash, team, role, created_at, revoked_at FROM tokens ORDER BY created_at, id`, nil, scanToken)
}

// RevokeToken sets a token's revoked_at. Revoking it again keeps the first
// time and writes no event; an unknown id wraps gpufleet.ErrNotFound.
func (s *SQL) RevokeToken(ctx context.Context, id string, at time.Time, actor string) error {
	at = s.orNow(at)
	return s.write(ctx, func(tx *sql.Tx) error {
		var (
			team    string
			revoked sql.NullInt64
		)
		err := tx.QueryRowContext(ctx, s.q(`SELECT team, revoked_at FROM tokens WHERE id = ?`+s.d.forUpdate), id).Scan(&team, &revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("token", id)
		}
		if err != nil {
			return fmt.Errorf("revoke token %s: %w", id, err)
		}
		if revoked.Valid {
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE tokens SET revoked_at = ? WHERE id = ?`), nanos(at), id); err != nil {
			return fmt.Errorf("revoke token %s: %w", id, err)
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "token.revoked", Object: id, Team: team})
	})
}

// CreateJoinToken stores a join token (its hash). An id in use wraps
// gpufleet.ErrInvalid.
func (s *SQL) CreateJoinToken(ctx context.Context, t JoinToken, actor string) error {
	switch {
	case t.ID == "":
		return invalid("join token id is empty")
	case len(t.Hash) == 0:
		return invalid("join token %s: hash is empty", t.ID)
	}
	created := s.orNow(t.CreatedAt)
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO join_tokens (id, hash, node, single_use, expires_at, used_at, created_at, replaces)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`),
			t.ID, t.Hash, t.Node, t.SingleUse, nullNanos(t.ExpiresAt), nullNanos(t.UsedAt), nanos(created), t.Replaces)
		if err != nil {
			return fmt.Errorf("create join token %s: %w", t.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return invalid("join token id %q is in use", t.ID)
		}
		detail := "multi-use"
		if t.SingleUse {
			detail = "single-use"
		}
		if t.Node != "" {
			detail += " node=" + t.Node
		}
		if t.Replaces {
			detail += ", replaces the node"
		}
		return s.insertEvent(ctx, tx, gpufleet.Event{At: created, Actor: actor, Kind: "join_token.created", Object: t.ID, Detail: detail})
	})
}

const joinTokenCols = `id, hash, node, single_use, expires_at, used_at, created_at, replaces`

func scanJoinToken(r scanner) (JoinToken, error) {
	var (
		t             JoinToken
		expires, used sql.NullInt64
		created       int64
	)
	if err := r.Scan(&t.ID, &t.Hash, &t.Node, &t.SingleUse, &expires, &used, &created, &t.Replaces); err != nil {
		return t, err
	}
	t.ExpiresAt, t.UsedAt, t.CreatedAt = ptrTime(expires), ptrTime(used), fromNanos(created)
	return t, nil
}

// UseJoinToken checks and spends a join token in one transaction: it must
// exist, its hash must equal hash (compared in constant time), it must not
// be expired at at nor a spent single-use token, and, when bound to a
// node, be used by that node. A token bound to no name may take the name
// only when takeover is true (the caller found no live node of that name):
// otherwise the error wraps ErrNameInUse and the token is not spent. It records at as used_at (for a multi-use
// token, the last use) and returns the token. Every refusal wraps
// gpufleet.ErrNotFound, so a caller cannot tell a wrong id from a wrong
// secret or a spent token.
func (s *SQL) UseJoinToken(ctx context.Context, id string, hash []byte, node string, at time.Time, proven bool) (JoinToken, error) {
	at = s.orNow(at)
	var out JoinToken
	err := s.write(ctx, func(tx *sql.Tx) error {
		t, err := scanJoinToken(tx.QueryRowContext(ctx, s.q(`SELECT `+joinTokenCols+` FROM join_tokens WHERE id = ?`+s.d.forUpdate), id))
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("join token", id)
		}
		if err != nil {
			return fmt.Errorf("use join token %s: %w", id, err)
		}
		switch {
		case subtle.ConstantTimeCompare(hash, t.Hash) != 1:
			return fmt.Errorf("%w: join token %q: secret does not match", gpufleet.ErrNotFound, id)
		case t.ExpiresAt != nil && !at.Before(*t.ExpiresAt):
			return fmt.Errorf("%w: join token %q expired", gpufleet.ErrNotFound, id)
		case t.SingleUse && t.UsedAt != nil:
			return fmt.Errorf("%w: join token %q is spent", gpufleet.ErrNotFound, id)
		case t.Node != "" && t.Node != node:
			return fmt.Errorf("%w: join token %q is bound to another node", gpufleet.ErrNotFound, id)
		}
		if !proven && !(t.Replaces && t.Node == node) {
			var one int
			err := tx.QueryRowContext(ctx, s.q(`SELECT 1 FROM nodes WHERE name = ?`), node).Scan(&one)
			switch {
			case err == nil:
				return fmt.Errorf("%w: node %s exists, and join token %q does not replace it", ErrNameInUse, gpufleet.Quote(node), id)
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("use join token %s: %w", id, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE join_tokens SET used_at = ? WHERE id = ?`), nanos(at), id); err != nil {
			return fmt.Errorf("use join token %s: %w", id, err)
		}
		t.UsedAt = &at
		out = t
		return s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: "agent:" + node, Kind: "join_token.used", Object: id, Detail: "node " + node})
	})
	return out, err
}

// ExpireJoinTokens expires, at at, every join token bound to node that
// is still usable, so that no agent holding one can register as the node
// again; it records an event per token and returns how many it expired.
func (s *SQL) ExpireJoinTokens(ctx context.Context, node string, at time.Time, actor string) (int, error) {
	if node == "" {
		return 0, invalid("expire join tokens: no node name")
	}
	at = s.orNow(at)
	n := 0
	err := s.write(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, s.q(`SELECT id FROM join_tokens WHERE node = ? AND (expires_at IS NULL OR expires_at > ?)
	AND NOT (single_use AND used_at IS NOT NULL) ORDER BY id`), node, nanos(at))
		if err != nil {
			return fmt.Errorf("expire join tokens of %s: %w", node, err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("expire join tokens of %s: %w", node, err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("expire join tokens of %s: %w", node, err)
		}
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, s.q(`UPDATE join_tokens SET expires_at = ? WHERE id = ?`), nanos(at), id); err != nil {
				return fmt.Errorf("expire join token %s: %w", id, err)
			}
			if err := s.insertEvent(ctx, tx, gpufleet.Event{At: at, Actor: actor, Kind: "join_token.expired", Object: id, Detail: "node " + node}); err != nil {
				return err
			}
		}
		n = len(ids)
		return nil
	})
	return n, err
}

// JoinTokens lists the join tokens in creation order.
func (s *SQL) JoinTokens(ctx context.Context) ([]JoinToken, error) {
	return list(ctx, s.rd, `SELECT `+joinTokenCols+` FROM join_tokens ORDER BY created_at, id`, nil, scanJoinToken)
}

// PutNodeCredential creates or replaces a node's credential.
func (s *SQL) PutNodeCredential(ctx context.Context, c NodeCredential) error {
	if c.Node == "" || len(c.Hash) == 0 {
		return invalid("node credential needs a node and a hash")
	}
	var prev, prevExp any
	if len(c.PrevHash) > 0 {
		prev, prevExp = c.PrevHash, nanos(c.PrevExpiresAt)
	}
	_, err := s.wr.ExecContext(ctx, s.q(`INSERT INTO node_credentials (node, hash, expires_at, prev_hash, prev_expires_at) VALUES (?, ?, ?, ?, ?)
	ON CONFLICT (node) DO UPDATE SET hash = excluded.hash, expires_at = excluded.expires_at,
	prev_hash = excluded.prev_hash, prev_expires_at = excluded.prev_expires_at`), c.Node, c.Hash, nanos(c.ExpiresAt), prev, prevExp)
	if err != nil {
		return fmt.Errorf("put node credential %s: %w", c.Node, err)
	}
	return nil
}

// NodeCredential reads a node's credential.
func (s *SQL) NodeCredential(ctx context.Context, node string) (NodeCredential, error) {
	var (
		c       NodeCredential
		exp     int64
		prevExp sql.NullInt64
	)
	err := s.rd.QueryRowContext(ctx, s.q(`SELECT node, hash, expires_at, prev_hash, prev_expires_at FROM node_credentials WHERE node = ?`), node).
		Scan(&c.Node, &c.Hash, &exp, &c.PrevHash, &prevExp)
	if errors.Is(err, sql.ErrNoRows) {
		return c, notFound("node credential", node)
	}
	if err != nil {
		return c, fmt.Errorf("read node credential %s: %w", node, err)
	}
	c.ExpiresAt = fromNanos(exp)
	if prevExp.Valid {
		c.PrevExpiresAt = fromNanos(prevExp.Int64)
	}
	return c, nil
}
