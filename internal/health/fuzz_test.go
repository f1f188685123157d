package health

import (
	"testing"
	"time"
)

// fuzzReader hands out values from fuzz bytes, zeros once they run out.
type fuzzReader struct{ data []byte }

func (r *fuzzReader) byte() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *fuzzReader) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

func (r *fuzzReader) optU64() *uint64 {
	switch r.byte() % 4 {
	case 0:
		return nil
	case 1:
		v := uint64(r.byte())
		return &v
	case 2:
		v := r.u64()
		return &v
	}
	v := ^uint64(0) - uint64(r.byte())
	return &v
}

func (r *fuzzReader) optInt() *int {
	if r.byte()%3 == 0 {
		return nil
	}
	v := int(int8(r.byte()))
	return &v
}

func (r *fuzzReader) optBool() *bool {
	switch r.byte() % 3 {
	case 0:
		return nil
	case 1:
		v := true
		return &v
	}
	v := false
	return &v
}

func (r *fuzzReader) optFloat() *float64 {
	if r.byte()%3 == 0 {
		return nil
	}
	v := float64(int8(r.byte())) / 50
	return &v
}

func (r *fuzzReader) gpu() GPUEvidence {
	g := GPUEvidence{Index: int(int8(r.byte())) % 12, UUID: string(rune('a' + r.byte()%4)), Present: r.byte()%5 != 0}
	for n := r.byte() % 4; n > 0; n-- {
		g.XIDs = append(g.XIDs, int(r.byte()))
	}
	g.ECCCorrectedVolatile, g.ECCUncorrectedVolatile = r.optU64(), r.optU64()
	g.ECCCorrectedAggregate, g.ECCUncorrectedAggregate = r.optU64(), r.optU64()
	g.RetiredPagesSBE, g.RetiredPagesDBE, g.RetiredPagesPending = r.optU64(), r.optU64(), r.optBool()
	g.RemappedRowsCorrectable, g.RemappedRowsUncorrectable = r.optU64(), r.optU64()
	g.RowRemapPending, g.RowRemapFailure = r.optBool(), r.optBool()
	g.ClockEventReasons = r.optU64()
	g.PCIeGen, g.PCIeWidth, g.PCIeMaxGen, g.PCIeMaxWidth, g.PCIeReplayCount = r.optInt(), r.optInt(), r.optInt(), r.optInt(), r.optU64()
	g.NVLinkLinksUp, g.NVLinkLinksTotal, g.NVLinkErrors = r.optInt(), r.optInt(), r.optU64()
	g.Utilization = r.optFloat()
	return g
}

// FuzzEvaluate runs several evaluations of a node built from the fuzz
// bytes, with time moving by fuzzed steps (sometimes backwards), and
// checks that Evaluate never panics and every condition is well formed.
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 8, 0, 1, 4, 79, 48, 13, 94, 2, 1, 2, 200, 1, 1, 2, 0x40, 0, 2, 5, 1, 5, 2, 16, 2, 16, 2, 7, 1, 17, 1, 18})
	f.Add([]byte("\x02\x09\x03\x01\x02\xff\xff\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		cfg := Config{}
		if r.byte()%2 == 0 {
			cfg = Config{ThrottleSustain: time.Duration(r.byte()) * time.Second, EventHold: time.Duration(int8(r.byte())) * time.Minute,
				ECCCorrectedGrowth: uint64(r.byte()), PCIeLoadUtilization: float64(r.byte()) / 100, RetiredPagesHigh: uint64(r.byte())}
		}
		var st State
		now := t0
		for round := 0; round < 4; round++ {
			ev := NodeEvidence{Node: "n", InventoryGPUs: int(int8(r.byte())),
				HeartbeatAge: time.Duration(int16(r.u64())) * time.Second, HeartbeatGrace: time.Duration(int8(r.byte())) * time.Second}
			for n := r.byte() % 5; n > 0; n-- {
				ev.GPUs = append(ev.GPUs, r.gpu())
			}
			var conds []Condition
			st, conds = Evaluate(st, ev, now, cfg)
			for _, c := range conds {
				if c.Rule == "" || c.Explanation == "" || c.Reason == "" || !c.Action.Valid() || c.Severity == "" || c.Since.IsZero() {
					t.Fatalf("malformed condition %+v", c)
				}
			}
			s := Summarize(conds)
			if !s.Action.Valid() || s.Health == "" {
				t.Fatalf("malformed summary %+v", s)
			}
			if r.byte()%7 == 0 {
				st = st.ClearGPU(int(int8(r.byte())) % 12)
			}
			now = now.Add(time.Duration(int16(r.u64())) * time.Second)
		}
	})
}
