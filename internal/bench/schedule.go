package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufleet/gpufleet"
)

// Schedule re-benches idle nodes on its own: a node whose newest figures
// are older than Every is due; the leader benches due nodes only inside
// the maintenance window (UTC), at most PerHour starts in any hour, and
// only nodes that are ready and run nothing (gpufleet server
// --bench-schedule, docs/BENCH.md#scheduled-re-bench). Its text is
// "every=7d,window=02:00-06:00,rate=2/h,level=quick".
type Schedule struct {
	Every time.Duration
	// From and To are minutes after midnight UTC; From == To means any
	// time. A window that wraps midnight (22:00-04:00) is allowed.
	From, To int
	PerHour  int
	Level    Level
}

// Default rate and level of a schedule that names none.
const (
	DefaultSchedulePerHour = 1
	maxSchedulePerHour     = 1000
)

// ParseSchedule reads "every=DUR[,window=HH:MM-HH:MM][,rate=N/h][,level=L]";
// every is required.
func ParseSchedule(s string) (Schedule, error) {
	out := Schedule{PerHour: DefaultSchedulePerHour, Level: LevelQuick}
	bad := func(why string) (Schedule, error) {
		return Schedule{}, fmt.Errorf("%w: bench schedule %s: %s", gpufleet.ErrInvalid, gpufleet.Quote(s), why)
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return bad("expected every=DUR[,window=HH:MM-HH:MM][,rate=N/h][,level=quick|medium|long], each once")
		}
		seen[k] = true
		switch k {
		case "every":
			d, err := gpufleet.ParseDuration(v)
			if err != nil || d < time.Hour {
				return bad("every: expected a duration of an hour or more (7d)")
			}
			out.Every = d
		case "window":
			from, to, ok := strings.Cut(v, "-")
			f, err1 := clockMinutes(from)
			t, err2 := clockMinutes(to)
			if !ok || err1 != nil || err2 != nil {
				return bad("window: expected HH:MM-HH:MM in UTC (02:00-06:00)")
			}
			out.From, out.To = f, t
		case "rate":
			n, err := strconv.Atoi(strings.TrimSuffix(v, "/h"))
			if !strings.HasSuffix(v, "/h") || err != nil || n < 1 || n > maxSchedulePerHour {
				return bad(fmt.Sprintf("rate: expected nodes per hour from 1 to %d (2/h)", maxSchedulePerHour))
			}
			out.PerHour = n
		case "level":
			l, err := ParseLevel(v)
			if err != nil {
				return bad(err.Error())
			}
			out.Level = l
		default:
			return bad(fmt.Sprintf("%s: expected every, window, rate or level", gpufleet.Quote(k)))
		}
	}
	if out.Every == 0 {
		return bad("every: required")
	}
	return out, nil
}

// clockMinutes reads HH:MM as minutes after midnight.
func clockMinutes(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return t.Hour()*60 + t.Minute(), nil
}

// String writes the schedule as ParseSchedule reads it.
func (s Schedule) String() string {
	out := "every=" + gpufleet.FormatDuration(s.Every)
	if s.From != s.To {
		out += fmt.Sprintf(",window=%02d:%02d-%02d:%02d", s.From/60, s.From%60, s.To/60, s.To%60)
	}
	return out + fmt.Sprintf(",rate=%d/h,level=%s", s.PerHour, s.Level)
}

// Open reports whether now is inside the window.
func (s Schedule) Open(now time.Time) bool {
	if s.From == s.To {
		return true
	}
	u := now.UTC()
	m := u.Hour()*60 + u.Minute()
	if s.From < s.To {
		return m >= s.From && m < s.To
	}
	return m >= s.From || m < s.To // wraps midnight
}

// Candidate is a node as the schedule sees it: whether it may be taken
// now (ready, healthy or degraded, running nothing) and when its newest
// figures were measured (zero: never).
type Candidate struct {
	Node      string
	Idle      bool
	LastBench time.Time
}

// Due is the nodes to re-bench at now: inside the window, the idle nodes
// whose newest figures are older than Every, oldest first, as many as the
// hourly rate leaves after the starts of the past hour (started).
func (s Schedule) Due(cands []Candidate, started []time.Time, now time.Time) []string {
	if s.Every <= 0 || !s.Open(now) {
		return nil
	}
	left := s.PerHour
	for _, t := range started {
		if now.Sub(t) < time.Hour {
			left--
		}
	}
	var due []Candidate
	for _, c := range cands {
		if c.Idle && now.Sub(c.LastBench) >= s.Every {
			due = append(due, c)
		}
	}
	slices.SortStableFunc(due, func(a, b Candidate) int {
		if c := a.LastBench.Compare(b.LastBench); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	var out []string
	for _, c := range due {
		if left <= 0 {
			break
		}
		out = append(out, c.Node)
		left--
	}
	return out
}
