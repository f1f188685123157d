package store

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Job and attempt ids are "j-" or "a-" followed by 16 characters of
// lowercase Crockford base32: 10 for the milliseconds since the Unix epoch
// and 6 (30 bits) random. The alphabet is in ASCII order, so ids sort by
// time, and the generator is monotonic: an id generated in the same
// millisecond as the previous one, or while the clock stands still or
// steps back, is the previous one plus one. Open seeds the generator with
// the largest id stored, so ids keep increasing across restarts too.
// Since the store generates job ids inside the submitting transaction,
// ListJobs in id order is submission order.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

const (
	idTimeChars = 10
	idRandChars = 6
	idRandBits  = 5 * idRandChars
	// idMaxMS is the largest time part (year 37648): a clock past it, or
	// an id stored at it, saturates there instead of wrapping to small ids.
	idMaxMS = 1<<(5*idTimeChars) - 1
)

// idGen makes monotonic sortable ids with one prefix.
type idGen struct {
	mu     sync.Mutex
	prefix string
	ms     uint64 // time part of the last id
	rnd    uint64 // random part of the last id
}

// next returns a new id, greater than every id it returned before, until
// the id space runs out: past the largest id ("zzzz..."), it returns that
// one again (and storing it fails as a duplicate) rather than a smaller one.
func (g *idGen) next(now time.Time) string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	ms := min(uint64(max(now.UnixMilli(), 0)), idMaxMS)
	rnd := binary.LittleEndian.Uint64(b[:]) & (1<<idRandBits - 1)
	g.mu.Lock()
	if ms < g.ms || (ms == g.ms && rnd <= g.rnd) {
		ms, rnd = g.ms, g.rnd+1
		if rnd == 1<<idRandBits {
			ms, rnd = ms+1, 0
		}
		if ms > idMaxMS {
			ms, rnd = idMaxMS, 1<<idRandBits-1
		}
	}
	g.ms, g.rnd = ms, rnd
	g.mu.Unlock()
	return g.prefix + encodeBase32(ms, idTimeChars) + encodeBase32(rnd, idRandChars)
}

// observe makes the generator's future ids greater than id, when id is one
// of its own.
func (g *idGen) observe(id string) {
	ms, rnd, ok := parseID(g.prefix, id)
	if !ok {
		return
	}
	g.mu.Lock()
	if ms > g.ms || (ms == g.ms && rnd > g.rnd) {
		g.ms, g.rnd = ms, rnd
	}
	g.mu.Unlock()
}

func encodeBase32(v uint64, n int) string {
	b := make([]byte, n)
	for i := n - 1; i >= 0; i-- {
		b[i] = idAlphabet[v&31]
		v >>= 5
	}
	return string(b)
}

// parseID splits a generated id into its time and random parts.
func parseID(prefix, id string) (ms, rnd uint64, ok bool) {
	rest, found := strings.CutPrefix(id, prefix)
	if !found || len(rest) != idTimeChars+idRandChars {
		return 0, 0, false
	}
	for i := 0; i < len(rest); i++ {
		d := strings.IndexByte(idAlphabet, rest[i])
		if d < 0 {
			return 0, 0, false
		}
		if i < idTimeChars {
			ms = ms<<5 | uint64(d)
		} else {
			rnd = rnd<<5 | uint64(d)
		}
	}
	return ms, rnd, true
}

// seedIDs points the id generators past the largest stored ids.
func (s *SQL) seedIDs(ctx context.Context) error {
	s.jobIDs.prefix, s.attemptIDs.prefix = "j-", "a-"
	for _, x := range []struct {
		g     *idGen
		query string
	}{
		{&s.jobIDs, `SELECT MAX(id) FROM jobs WHERE id LIKE 'j-%' AND length(id) = 18`},
		{&s.attemptIDs, `SELECT MAX(id) FROM attempts WHERE id LIKE 'a-%' AND length(id) = 18`},
	} {
		var id *string
		if err := s.wr.QueryRowContext(ctx, x.query).Scan(&id); err != nil {
			return fmt.Errorf("seed ids: %w", err)
		}
		if id != nil {
			x.g.observe(*id)
		}
	}
	return nil
}

// ValidJobID reports whether s has the form of a job id: "j-" and 16
// characters of the id alphabet. ListJobs takes one as its cursor.
func ValidJobID(s string) bool {
	rest, ok := strings.CutPrefix(s, "j-")
	if !ok || len(rest) != idTimeChars+idRandChars {
		return false
	}
	for i := range len(rest) {
		if !strings.ContainsRune(idAlphabet, rune(rest[i])) {
			return false
		}
	}
	return true
}
