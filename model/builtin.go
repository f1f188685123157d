package model

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/gpufleet/gpufleet"
)

// configs holds the built-in config.json files; configs/SOURCES.md says where
// each comes from.
//
//go:embed configs/*.json configs/SOURCES.md
var configs embed.FS

// BuiltinNames returns the names of the built-in models, sorted: the base
// names of the embedded config files ("llama-3.1-70b", "mixtral-8x7b-v0.1").
func BuiltinNames() []string {
	entries, err := fs.ReadDir(configs, "configs")
	if err != nil {
		return nil // cannot happen: the directory is embedded
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Builtin parses the built-in model name. Each call returns a fresh Config
// the caller may change. An unknown name gives an error wrapping
// gpufleet.ErrNotFound that lists the built-in names.
func Builtin(name string) (*Config, error) {
	data, err := configs.ReadFile("configs/" + name + ".json")
	if err != nil || strings.ContainsAny(name, "/\\") {
		return nil, fmt.Errorf("%w: built-in model %q (known: %s)",
			gpufleet.ErrNotFound, name, strings.Join(BuiltinNames(), ", "))
	}
	return Parse(name, data)
}
