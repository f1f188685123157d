package forecast

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Season is the length of the seasonal cycle in days: a week.
const Season = 7

// MinDays is the shortest history a model is fitted on: two seasons to
// set the seasonal terms, and one more to score the fit.
const MinDays = 3 * Season

// Series is a daily series from Start (a UTC midnight): Values[i] is day
// Start + i.
type Series struct {
	Start  time.Time `json:"start"`
	Values []float64 `json:"values"`
}

// Validate checks a series read from outside: finite, non-negative values.
func (s Series) Validate() error {
	for i, v := range s.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: demand on day %d (%s): %g: expected a finite, non-negative number", gpufleet.ErrInvalid, i, s.Day(i).Format(time.DateOnly), v)
		}
	}
	return nil
}

// Day is the date of index i.
func (s Series) Day(i int) time.Time { return s.Start.AddDate(0, 0, i) }

// Head is the first n days.
func (s Series) Head(n int) Series { return Series{Start: s.Start, Values: s.Values[:n]} }

// Forecast is a prediction of the days after a history.
type Forecast struct {
	Method string    `json:"method"`
	Start  time.Time `json:"start"` // the first predicted day
	Mean   []float64 `json:"mean"`
	// Lo80, Hi80 and Lo95, Hi95 are the prediction intervals (demand is
	// never negative: the low ends stop at zero).
	Lo80 []float64 `json:"lo80"`
	Hi80 []float64 `json:"hi80"`
	Lo95 []float64 `json:"lo95"`
	Hi95 []float64 `json:"hi95"`
	// Params are the fitted smoothing parameters (Holt-Winters only).
	Params *Params `json:"params,omitempty"`
	// SD is the standard deviation of the one-step errors on the history.
	SD float64 `json:"sd"`
}

// Normal quantiles of the two intervals.
const (
	z80 = 1.2816
	z95 = 1.9600
)

// ErrShort is returned for a history too short to fit.
var ErrShort = errors.New("history too short")

// Params are Holt-Winters' smoothing parameters: level Alpha, trend Beta,
// season Gamma, trend damping Phi.
type Params struct {
	Alpha float64 `json:"alpha"`
	Beta  float64 `json:"beta"`
	Gamma float64 `json:"gamma"`
	Phi   float64 `json:"phi"`
}

// The grid Fit searches: coarse, so that a fit is cheap and the choice
// is not tuned to any one history.
var (
	alphas = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.7}
	betas  = []float64{0, 0.01, 0.05, 0.1}
	gammas = []float64{0.05, 0.1, 0.2, 0.3}
	phis   = []float64{0.8, 0.9, 0.98}
)

// state is the model after a day.
type state struct {
	level, trend float64
	season       [Season]float64
}

// initState sets the level and trend from the first two seasons' means
// and the season from the first season's deviations from its mean.
func initState(y []float64) state {
	var m1, m2 float64
	for i := range Season {
		m1 += y[i] / Season
		m2 += y[Season+i] / Season
	}
	st := state{level: m1, trend: (m2 - m1) / Season}
	for i := range Season {
		st.season[i] = y[i] - m1
	}
	return st
}

// run filters y from day Season on, returning the final state and the
// one-step errors (from day 2*Season, once the state has settled).
func run(y []float64, p Params) (state, []float64) {
	st := initState(y)
	var errs []float64
	for t := Season; t < len(y); t++ {
		s := st.season[t%Season]
		pred := st.level + p.Phi*st.trend + s
		if t >= 2*Season {
			errs = append(errs, y[t]-pred)
		}
		level := p.Alpha*(y[t]-s) + (1-p.Alpha)*(st.level+p.Phi*st.trend)
		st.trend = p.Beta*(level-st.level) + (1-p.Beta)*p.Phi*st.trend
		st.season[t%Season] = p.Gamma*(y[t]-level) + (1-p.Gamma)*s
		st.level = level
	}
	return st, errs
}

// HoltWinters fits additive Holt-Winters with a damped trend and a weekly
// season to s, choosing the parameters on the grid that minimise the sum
// of squared one-step errors, and forecasts h days with intervals from
// those errors' spread grown with the horizon (Hyndman et al., Forecasting
// with Exponential Smoothing, 2008, class 1 variance: σ²(1 + Σ c_j²),
// c_j = α(1 + βφ_j) + γ·[j mod m = 0], φ_j = φ + … + φ^j).
func HoltWinters(s Series, h int) (Forecast, error) {
	y := s.Values
	if len(y) < MinDays {
		return Forecast{}, fmt.Errorf("%w: %d days, at least %d (three weeks)", ErrShort, len(y), MinDays)
	}
	best, bestSSE := Params{}, math.Inf(1)
	for _, a := range alphas {
		for _, b := range betas {
			for _, g := range gammas {
				for _, ph := range phis {
					p := Params{a, b, g, ph}
					_, errs := run(y, p)
					sse := 0.0
					for _, e := range errs {
						sse += e * e
					}
					if sse < bestSSE {
						best, bestSSE = p, sse
					}
				}
			}
		}
	}
	st, errs := run(y, best)
	sd := stddev(errs)
	f := newForecast("holt-winters", s.Day(len(y)), h, sd)
	f.Params = &best
	phiSum, cSq := 0.0, 0.0
	for j := 1; j <= h; j++ {
		phiSum += math.Pow(best.Phi, float64(j))
		mean := st.level + phiSum*st.trend + st.season[(len(y)+j-1)%Season]
		f.set(j-1, mean, sd*math.Sqrt(1+cSq))
		c := best.Alpha * (1 + best.Beta*phiSum)
		if j%Season == 0 {
			c += best.Gamma
		}
		cSq += c * c
	}
	return f, nil
}

// SeasonalNaive forecasts each day as the same weekday of the last week
// of s, the baseline a practitioner reaches for first; its intervals come
// from the spread of its own one-week-ahead errors on s, grown with the
// number of weeks ahead (Hyndman and Athanasopoulos, Forecasting:
// Principles and Practice, 3rd ed., 5.5: σ√(k+1) for the k+1-th week).
func SeasonalNaive(s Series, h int) (Forecast, error) {
	y := s.Values
	if len(y) < 2*Season {
		return Forecast{}, fmt.Errorf("%w: %d days, at least %d (two weeks)", ErrShort, len(y), 2*Season)
	}
	var errs []float64
	for t := Season; t < len(y); t++ {
		errs = append(errs, y[t]-y[t-Season])
	}
	sd := stddev(errs)
	f := newForecast("seasonal-naive", s.Day(len(y)), h, sd)
	for j := range h {
		k := j / Season
		f.set(j, y[len(y)-Season+j%Season], sd*math.Sqrt(float64(k+1)))
	}
	return f, nil
}

func newForecast(method string, start time.Time, h int, sd float64) Forecast {
	return Forecast{Method: method, Start: start, SD: sd, Mean: make([]float64, h),
		Lo80: make([]float64, h), Hi80: make([]float64, h), Lo95: make([]float64, h), Hi95: make([]float64, h)}
}

// set writes day j: the mean (never below zero) and the intervals of a
// normal error of standard deviation sd around it.
func (f *Forecast) set(j int, mean, sd float64) {
	mean = max(mean, 0)
	f.Mean[j] = mean
	f.Lo80[j], f.Hi80[j] = max(mean-z80*sd, 0), mean+z80*sd
	f.Lo95[j], f.Hi95[j] = max(mean-z95*sd, 0), mean+z95*sd
}

func stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	var sum, sq float64
	for _, x := range xs {
		sum += x
	}
	m := sum / float64(len(xs))
	for _, x := range xs {
		sq += (x - m) * (x - m)
	}
	return math.Sqrt(sq / float64(len(xs)-1))
}

// Method forecasts h days after a history.
type Method func(s Series, h int) (Forecast, error)

// Score is a method's error over a backtest.
type Score struct {
	Method string `json:"method"`
	// Origins is how many forecasts were made; Points how many predicted
	// days were scored (MAPE skips days of zero demand).
	Origins int `json:"origins"`
	Points  int `json:"points"`
	// MAPE is the mean absolute percentage error over days with demand.
	MAPE float64 `json:"mape"`
	// WAPE is the absolute errors over the demand, summed over every
	// scored day: what a capacity plan feels, which days of little demand
	// do not swamp as they do MAPE.
	WAPE float64 `json:"wape"`
	// Coverage80 and Coverage95 are the shares of days inside the 80% and
	// 95% intervals: an honest interval holds about that share.
	Coverage80 float64 `json:"coverage_80"`
	Coverage95 float64 `json:"coverage_95"`
}

// Backtest scores m on s with rolling origins: a forecast of h days from
// every step-th day once MinDays of history exist, against what
// happened. Nothing of the days after an origin is seen by its forecast.
func Backtest(s Series, h, step int, name string, m Method) (Score, error) {
	if h < 1 || step < 1 {
		return Score{}, fmt.Errorf("%w: horizon and step must be positive", gpufleet.ErrInvalid)
	}
	sc := Score{Method: name}
	var ape []float64
	in80, in95, n := 0, 0, 0
	absErr, total := 0.0, 0.0
	for origin := MinDays; origin+h <= len(s.Values); origin += step {
		f, err := m(s.Head(origin), h)
		if err != nil {
			return Score{}, err
		}
		sc.Origins++
		for j := range h {
			y := s.Values[origin+j]
			n++
			if y >= f.Lo80[j] && y <= f.Hi80[j] {
				in80++
			}
			if y >= f.Lo95[j] && y <= f.Hi95[j] {
				in95++
			}
			if y > 0 {
				ape = append(ape, math.Abs(f.Mean[j]-y)/y)
			}
			absErr += math.Abs(f.Mean[j] - y)
			total += y
		}
	}
	if n == 0 {
		return Score{}, fmt.Errorf("%w: %d days leave no origin for a %d-day horizon", ErrShort, len(s.Values), h)
	}
	sc.Points = n
	sc.Coverage80, sc.Coverage95 = float64(in80)/float64(n), float64(in95)/float64(n)
	if total > 0 {
		sc.WAPE = absErr / total
	}
	if len(ape) > 0 {
		sum := 0.0
		for _, a := range ape {
			sum += a
		}
		sc.MAPE = sum / float64(len(ape))
	}
	return sc, nil
}

// Quantile is the p-quantile (0 < p < 1) of day d's demand under the
// forecast's normal error, never below zero: the mean plus z(p) standard
// deviations, the deviation read back from the 80% interval.
func (f Forecast) Quantile(d int, p float64) float64 {
	sd := f.DaySD(d)
	if !(sd > 0) {
		return max(f.Mean[d], 0)
	}
	return max(f.Mean[d]+math.Sqrt2*math.Erfinv(2*p-1)*sd, 0)
}

// DaySD is the standard deviation of day d's demand.
func (f Forecast) DaySD(d int) float64 { return (f.Hi80[d] - f.Mean[d]) / z80 }
