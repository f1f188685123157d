package forecast

import (
	"encoding/xml"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpufleet/gpufleet"
)

var day0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC) // a Monday

// synthetic is n days of a level with a trend, a weekday pattern (quiet
// weekends) and normal noise of sd.
func synthetic(n int, level, trend, sd float64, seed uint64) Series {
	rng := rand.New(rand.NewPCG(seed, 1))
	week := [Season]float64{20, 25, 25, 20, 10, -50, -50}
	s := Series{Start: day0}
	for i := range n {
		s.Values = append(s.Values, max(0, level+trend*float64(i)+week[i%Season]+sd*rng.NormFloat64()))
	}
	return s
}

func TestHoltWintersFollowsTrendAndWeek(t *testing.T) {
	s := synthetic(84, 500, 2, 10, 1)
	f, err := HoltWinters(s, 14)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Start.Equal(s.Day(84)) || len(f.Mean) != 14 || f.Params == nil {
		t.Fatalf("forecast %+v", f)
	}
	week := [Season]float64{20, 25, 25, 20, 10, -50, -50}
	for j := range 14 {
		want := 500 + 2*float64(84+j) + week[(84+j)%Season]
		if math.Abs(f.Mean[j]-want) > 40 {
			t.Errorf("day %d: %.0f, want about %.0f", j, f.Mean[j], want)
		}
		if !(f.Lo95[j] <= f.Lo80[j] && f.Lo80[j] <= f.Mean[j] && f.Mean[j] <= f.Hi80[j] && f.Hi80[j] <= f.Hi95[j]) {
			t.Errorf("day %d: intervals out of order: %+v", j, f)
		}
		if j > 0 && f.Hi80[j]-f.Lo80[j] < f.Hi80[j-1]-f.Lo80[j-1]-1e-9 {
			t.Errorf("day %d: the interval narrows with the horizon", j)
		}
	}
}

// TestBacktestBeatsSeasonalNaive: on trending weekly demand Holt-Winters
// beats the seasonal-naive baseline and its intervals hold about what
// they promise. The series are synthetic: the trace backtests are in
// docs/PERFORMANCE.md.
func TestBacktestBeatsSeasonalNaive(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		s := synthetic(120, 300, 1.5, 15, seed)
		hw, err := Backtest(s, 14, 7, "holt-winters", HoltWinters)
		if err != nil {
			t.Fatal(err)
		}
		sn, err := Backtest(s, 14, 7, "seasonal-naive", SeasonalNaive)
		if err != nil {
			t.Fatal(err)
		}
		if hw.MAPE >= sn.MAPE {
			t.Errorf("seed %d: holt-winters MAPE %.3f, seasonal naive %.3f", seed, hw.MAPE, sn.MAPE)
		}
		if hw.Coverage80 < 0.65 || hw.Coverage80 > 0.95 || hw.Coverage95 < hw.Coverage80 {
			t.Errorf("seed %d: coverage 80%% %.2f, 95%% %.2f", seed, hw.Coverage80, hw.Coverage95)
		}
		if hw.Origins != (120-MinDays-14)/7+1 || hw.Points != hw.Origins*14 {
			t.Errorf("seed %d: %d origins, %d points", seed, hw.Origins, hw.Points)
		}
	}
}

func TestShortAndBadHistories(t *testing.T) {
	if _, err := HoltWinters(synthetic(20, 10, 0, 1, 1), 7); !errors.Is(err, ErrShort) {
		t.Errorf("20 days: %v", err)
	}
	if _, err := SeasonalNaive(synthetic(13, 10, 0, 1, 1), 7); !errors.Is(err, ErrShort) {
		t.Errorf("13 days: %v", err)
	}
	if _, err := Backtest(synthetic(25, 10, 0, 1, 1), 14, 7, "hw", HoltWinters); !errors.Is(err, ErrShort) {
		t.Errorf("backtest without an origin: %v", err)
	}
	for _, v := range []float64{-1, math.NaN(), math.Inf(1)} {
		if err := (Series{Start: day0, Values: []float64{1, v}}).Validate(); !errors.Is(err, gpufleet.ErrInvalid) {
			t.Errorf("value %g: %v", v, err)
		}
	}
	// Zero demand forecasts zero, never below.
	f, err := HoltWinters(Series{Start: day0, Values: make([]float64, 28)}, 7)
	if err != nil || f.Mean[0] != 0 || f.Lo95[0] != 0 {
		t.Errorf("all zeros: %+v %v", f, err)
	}
}

// TestWriteSVG: a plot of a history and its forecast is well-formed SVG
// with every part drawn, and escapes its title.
func TestWriteSVG(t *testing.T) {
	s := synthetic(42, 100, 0, 5, 1)
	f, err := HoltWinters(s, 14)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteSVG(&b, "demand <all> & more", s, f, 150); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if err := xml.Unmarshal([]byte(out), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	for _, want := range []string{"demand &lt;all&gt; &amp; more", "<polygon", "stroke-dasharray", "capacity 150 GPU-hours a day", s.Start.Format(time.DateOnly)} {
		if !strings.Contains(out, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if err := WriteSVG(&b, "x", Series{}, Forecast{}, 0); err == nil {
		t.Error("an empty plot is drawn")
	}
}
