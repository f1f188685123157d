package planner

import (
	"encoding/json"
	"testing"
)

func mustJSON(t interface{ Fatal(...any) }, v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

var _ = testing.Short
