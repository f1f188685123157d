package cli

import (
	"bytes"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// newYAMLWriter turns the JSON documents a command writes (-o json) into
// YAML documents (-o yaml), each as soon as it is complete. Keys keep
// their order; strings that would read as another type stay quoted.
func newYAMLWriter(out io.Writer) *docWriter {
	return &docWriter{out: out, format: "-o yaml", emit: emitYAML}
}

// emitYAML writes one JSON document as YAML, after a separator unless it
// is the first.
func emitYAML(out io.Writer, doc []byte, n int) error {
	var node yaml.Node
	if err := yaml.Unmarshal(doc, &node); err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	block(&node)
	var b bytes.Buffer
	if n > 0 {
		b.WriteString("---\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	enc.Close()
	_, err := out.Write(b.Bytes())
	return err
}

// block makes a node read from JSON print in YAML's block style.
func block(n *yaml.Node) {
	if n.Kind != yaml.ScalarNode {
		n.Style = 0
	} else if n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0 // the encoder quotes what would read as another type
	}
	for _, c := range n.Content {
		block(c)
	}
}
