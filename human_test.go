package gpufleet

import (
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                             "0s",
		250 * time.Millisecond:        "250ms",
		45 * time.Second:              "45s",
		1500 * time.Millisecond:       "2s",
		90 * time.Second:              "1m30s",
		5*time.Minute + 5*time.Second: "5m5s",
		4 * time.Hour:                 "4h",
		2*time.Hour + 5*time.Minute + 59*time.Second: "2h5m",
		26 * time.Hour:               "1d2h",
		3*24*time.Hour + 4*time.Hour: "3d4h",
		2 * 24 * time.Hour:           "2d",
		-90 * time.Second:            "-1m30s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if d >= time.Second && d < 24*time.Hour {
			if back, err := ParseDuration(FormatDuration(d)); err != nil || back > d+time.Second || back < d-time.Minute {
				t.Errorf("ParseDuration(%q) = %v, %v; want about %v", FormatDuration(d), back, err, d)
			}
		}
	}
}
