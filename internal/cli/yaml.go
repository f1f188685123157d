package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// yamlWriter turns the JSON documents a command writes (-o json) into
// YAML documents (-o yaml), each as soon as it is complete, so that
// streams (watch, follow) come out as they happen. Keys keep their order;
// strings that would read as another type stay quoted.
type yamlWriter struct {
	out  io.Writer
	buf  []byte
	docs int
}

func (y *yamlWriter) Write(p []byte) (int, error) {
	y.buf = append(y.buf, p...)
	for {
		dec := json.NewDecoder(bytes.NewReader(y.buf))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return len(p), nil // wait for the rest
			}
			return 0, fmt.Errorf("-o yaml: %w", err)
		}
		y.buf = y.buf[dec.InputOffset():]
		if err := y.emit(raw); err != nil {
			return 0, err
		}
	}
}

// emit writes one JSON document as YAML.
func (y *yamlWriter) emit(doc []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(doc, &n); err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	block(&n)
	var b bytes.Buffer
	if y.docs > 0 {
		b.WriteString("---\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Errorf("-o yaml: %w", err)
	}
	enc.Close()
	y.docs++
	_, err := y.out.Write(b.Bytes())
	return err
}

// Close reports a document left incomplete.
func (y *yamlWriter) Close() error {
	if len(bytes.TrimSpace(y.buf)) > 0 {
		return errors.New("-o yaml: the output ended inside a JSON document")
	}
	return nil
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
