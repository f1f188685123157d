package store

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseID: parseID takes exactly the ids the generator writes (prefix
// and 16 characters of the alphabet), reads back what encodeBase32 wrote,
// orders ids as strings do, agrees with ValidJobID, and a generator that
// observed an id never makes a smaller one.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"j-01jdq9x2m80000000", "j-01jdq9x2m8abcdef", "a-0000000000000000", "j-zzzzzzzzzzzzzzzz", "j-zzzzzzzzzzzzzzzy",
		"j-0000000000zzzzzz", "j-01JDQ9X2M8ABCDEF", "j-01jdq9x2m8abcdeu", "j-01jdq9x2m8abcde", "j-01jdq9x2m8abcdef0", "j-", "", "x-0000000000000000",
		"j-iiiiiiiiiiiiiiii", "j-\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
	} {
		f.Add(s, "j-01jdq9x2m8abcdef", int64(1764504000000))
	}
	f.Add("j-zzzzzzzzzzzzzzzz", "j-zzzzzzzzzzzzzzzz", int64(1)<<62)
	f.Add("a-0000000000000001", "a-0000000000000000", int64(-1))
	f.Fuzz(func(t *testing.T, id, other string, nowMS int64) {
		prefix := "j-"
		if strings.HasPrefix(id, "a-") {
			prefix = "a-"
		}
		ms, rnd, ok := parseID(prefix, id)
		rest, _ := strings.CutPrefix(id, prefix)
		wantOK := strings.HasPrefix(id, prefix) && len(rest) == idTimeChars+idRandChars &&
			strings.Trim(rest, idAlphabet) == ""
		if ok != wantOK {
			t.Fatalf("parseID(%q, %q) ok = %v, want %v", prefix, id, ok, wantOK)
		}
		if prefix == "j-" && ValidJobID(id) != ok {
			t.Fatalf("ValidJobID(%q) = %v, parseID says %v", id, !ok, ok)
		}
		if !ok {
			return
		}
		if ms > idMaxMS || rnd >= 1<<idRandBits {
			t.Fatalf("parseID(%q) = %d, %d: out of range", id, ms, rnd)
		}
		if back := prefix + encodeBase32(ms, idTimeChars) + encodeBase32(rnd, idRandChars); back != id {
			t.Fatalf("parseID(%q) = %d, %d, which encodes as %q", id, ms, rnd, back)
		}
		// Ids order as their parts do.
		if oms, ornd, ok := parseID(prefix, other); ok {
			less := ms < oms || (ms == oms && rnd < ornd)
			if less != (id < other) {
				t.Fatalf("%q < %q is %v, but their parts (%d,%d) and (%d,%d) say %v", id, other, id < other, ms, rnd, oms, ornd, less)
			}
		}
		// A generator that saw id makes larger ones, whatever the clock.
		g := idGen{prefix: prefix}
		g.observe(id)
		prev := id
		for range 3 {
			next := g.next(time.UnixMilli(nowMS))
			if _, _, ok := parseID(prefix, next); !ok {
				t.Fatalf("after %q the generator made %q, which parseID refuses", id, next)
			}
			if next < prev || (next == prev && next != prefix+strings.Repeat("z", idTimeChars+idRandChars)) {
				t.Fatalf("after observing %q (clock %d ms) the generator made %q after %q", id, nowMS, next, prev)
			}
			prev = next
		}
	})
}
