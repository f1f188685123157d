package catalog

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gpufleet/gpufleet"
)

//go:embed data/gpus.csv
var embeddedCSV []byte

// Catalog is an immutable set of accelerator specifications with a name
// index. Its methods are safe for concurrent use; they return copies, so
// callers cannot change a Catalog.
type Catalog struct {
	gpus  []GPU
	index map[string]int // normalised id or alias -> position in gpus
	keys  []lookupKey    // every id and alias, for suggestions
}

type lookupKey struct {
	norm string
	pos  int
}

var (
	defaultOnce sync.Once
	defaultCat  *Catalog
)

// Default returns the catalog built from the embedded data file
// (catalog/data/gpus.csv), parsed once. It panics only if the embedded data
// is broken, which the package tests rule out.
func Default() *Catalog {
	defaultOnce.Do(func() {
		gpus, err := Parse(bytes.NewReader(embeddedCSV))
		if err != nil {
			panic(fmt.Sprintf("catalog: embedded data/gpus.csv: %v", err))
		}
		defaultCat = build(gpus)
	})
	return defaultCat
}

// New returns a catalog of gpus, in the given order. It validates every
// entry and rejects duplicate ids; errors wrap gpufleet.ErrInvalid.
func New(gpus []GPU) (*Catalog, error) {
	seen := map[string]bool{}
	out := make([]GPU, 0, len(gpus))
	for _, g := range gpus {
		g = cloneGPU(g)
		fillPrecisions(&g)
		if err := validate(g); err != nil {
			return nil, err
		}
		if seen[g.ID] {
			return nil, fmt.Errorf("%w: duplicate gpu id %q", gpufleet.ErrInvalid, g.ID)
		}
		seen[g.ID] = true
		out = append(out, g)
	}
	return build(out), nil
}

// build indexes gpus, which it takes ownership of. Ids win over aliases; a
// later alias wins over an earlier one, so overrides can take names over.
func build(gpus []GPU) *Catalog {
	c := &Catalog{gpus: gpus, index: make(map[string]int)}
	for i, g := range gpus {
		n := normalize(g.ID)
		c.index[n] = i
		c.keys = append(c.keys, lookupKey{n, i})
	}
	for i, g := range gpus {
		for _, a := range g.Aliases {
			n := normalize(a)
			if j, ok := c.index[n]; ok && normalize(gpus[j].ID) == n {
				continue // an id is never shadowed by an alias
			}
			c.index[n] = i
			c.keys = append(c.keys, lookupKey{n, i})
		}
	}
	return c
}

// All returns a copy of every entry, in data-file order, with entries that
// overrides added at the end.
func (c *Catalog) All() []GPU {
	out := make([]GPU, len(c.gpus))
	for i, g := range c.gpus {
		out[i] = cloneGPU(g)
	}
	return out
}

// IDs returns every id, in data-file order.
func (c *Catalog) IDs() []string {
	out := make([]string, len(c.gpus))
	for i, g := range c.gpus {
		out[i] = g.ID
	}
	return out
}

// vendorPrefixes are dropped from a name that matches nothing as given, so
// "NVIDIA L4" and "Tesla T4" resolve without listing every spelling.
var vendorPrefixes = []string{"nvidia", "tesla", "geforce", "amd", "instinct", "intel", "habana", "google", "cloud", "aws"}

// Lookup returns the entry whose id or alias matches name. Matching ignores
// case, spaces, dashes and underscores, and falls back to the name without a
// vendor prefix ("NVIDIA", "Tesla", "GeForce", "AMD Instinct"...). An
// unknown name gives an error wrapping gpufleet.ErrNotFound that suggests up
// to three ids by edit distance.
func (c *Catalog) Lookup(name string) (GPU, error) {
	n := normalize(name)
	if i, ok := c.index[n]; ok {
		return cloneGPU(c.gpus[i]), nil
	}
	for stripped := true; stripped; {
		stripped = false
		for _, p := range vendorPrefixes {
			if rest, ok := strings.CutPrefix(n, p); ok && rest != "" {
				n, stripped = rest, true
			}
		}
		if i, ok := c.index[n]; ok {
			return cloneGPU(c.gpus[i]), nil
		}
	}
	if s := c.suggest(normalize(name), 3); len(s) > 0 {
		return GPU{}, fmt.Errorf("%w: unknown GPU %s (did you mean %s?)", gpufleet.ErrNotFound, gpufleet.Quote(name), strings.Join(s, ", "))
	}
	return GPU{}, fmt.Errorf("%w: unknown GPU %s", gpufleet.ErrNotFound, gpufleet.Quote(name))
}

// suggest returns up to n distinct ids whose id or alias is closest to the
// normalised query (or to the query without a vendor prefix): smallest edit
// distance first, then longest common prefix, then data order.
func (c *Catalog) suggest(q string, n int) []string {
	if q == "" || len(c.gpus) == 0 {
		return nil
	}
	queries := []string{q}
	for _, p := range vendorPrefixes {
		if rest, ok := strings.CutPrefix(q, p); ok && rest != "" {
			queries = append(queries, rest)
		}
	}
	type score struct{ dist, prefix int }
	best := make([]score, len(c.gpus))
	for i := range best {
		best[i] = score{dist: -1}
	}
	for _, k := range c.keys {
		for _, qq := range queries {
			s := score{editDistance(qq, k.norm), commonPrefix(qq, k.norm)}
			b := best[k.pos]
			if b.dist < 0 || s.dist < b.dist || s.dist == b.dist && s.prefix > b.prefix {
				best[k.pos] = s
			}
		}
	}
	order := make([]int, len(c.gpus))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if best[a].dist != best[b].dist {
			return best[a].dist - best[b].dist
		}
		return best[b].prefix - best[a].prefix
	})
	// Only suggest names that share something with the query: fewer edits
	// than the query has characters.
	limit := max(len(q)-1, 1)
	var out []string
	for _, i := range order {
		if len(out) == n || best[i].dist > limit {
			break
		}
		out = append(out, c.gpus[i].ID)
	}
	return out
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// normalize lowercases s and drops spaces, dashes and underscores.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToLower(s) {
		switch r {
		case ' ', '-', '_', '\t':
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	if len(a) > 256 {
		a = a[:256]
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// cloneGPU deep-copies g so that no pointer, map or slice is shared.
func cloneGPU(g GPU) GPU {
	g.Aliases = slices.Clone(g.Aliases)
	g.MIGProfiles = slices.Clone(g.MIGProfiles)
	if g.PeakFLOPS != nil {
		m := make(map[gpufleet.Precision]*float64, len(g.PeakFLOPS))
		for p, v := range g.PeakFLOPS {
			m[p] = clonePtr(v)
		}
		g.PeakFLOPS = m
	}
	g.TDPWatts = clonePtr(g.TDPWatts)
	g.IdleWatts = clonePtr(g.IdleWatts)
	g.PricePerHourUSD = clonePtr(g.PricePerHourUSD)
	g.PurchasePriceUSD = clonePtr(g.PurchasePriceUSD)
	return g
}

func clonePtr(v *float64) *float64 {
	if v == nil {
		return nil
	}
	x := *v
	return &x
}

// fillPrecisions makes every precision of Precisions a key of PeakFLOPS.
func fillPrecisions(g *GPU) {
	if g.PeakFLOPS == nil {
		g.PeakFLOPS = make(map[gpufleet.Precision]*float64, len(gpufleet.Precisions()))
	}
	for _, p := range gpufleet.Precisions() {
		if _, ok := g.PeakFLOPS[p]; !ok {
			g.PeakFLOPS[p] = nil
		}
	}
}
